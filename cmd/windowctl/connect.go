package main

import (
	"os"
	"strings"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/redisaddr"
)

const (
	defaultAddr = redisaddr.Default
	addrEnv     = redisaddr.Env
)

var getenv = os.Getenv

// address returns the server address and where it came from: the --addr flag,
// $WINDOWSTORE_ADDR, or the default.
func (g *globals) address() (addr, source string) {
	if g.addrSet {
		return g.addr, "--addr"
	}
	if a := strings.TrimSpace(getenv(addrEnv)); a != "" {
		return a, "$" + addrEnv
	}
	return defaultAddr, "default"
}

// clientOption turns the address into a client option, with the --tls-* files.
// Every error is a usage error: nothing has been sent.
func (g *globals) clientOption() (rueidis.ClientOption, error) {
	addr, source := g.address()
	opt, err := redisaddr.Parse(addr)
	if err != nil {
		return rueidis.ClientOption{}, usagef("%s %v", source, err)
	}
	if err := (redisaddr.TLSFiles{CA: g.tlsCA, Cert: g.tlsCert, Key: g.tlsKey}).Apply(&opt); err != nil {
		return rueidis.ClientOption{}, usagef("%v", err)
	}
	opt.ConnWriteTimeout = g.timeout
	return opt, nil
}

// connect makes a client for the address. Errors never repeat the password.
func connect(g *globals) (rueidis.Client, error) {
	opt, err := g.clientOption()
	if err != nil {
		return nil, err
	}
	addr, _ := g.address()
	return redisaddr.Connect(opt, addr)
}
