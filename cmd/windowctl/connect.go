package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

const (
	defaultAddr = "127.0.0.1:6379"
	defaultPort = "6379"
	addrEnv     = "WINDOWSTORE_ADDR"
	addrWant    = "want host:port or redis://host:port"
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
	u, err := addrURL(addr)
	if err != nil {
		return rueidis.ClientOption{}, usagef("%s %q: %s", source, redact(addr), scrub(err.Error(), addr))
	}
	opt, err := rueidis.ParseURL(u)
	if err != nil {
		why := ""
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the whole URL, password and all
		}
		if _, _, secret := passwordAt(addr); !secret {
			// The parser may quote a piece of the password: say why only
			// when there is none.
			why = " (" + err.Error() + ")"
		}
		return rueidis.ClientOption{}, usagef("%s %q: not a valid URL%s; %s", source, redact(addr), why, addrWant)
	}
	if err := g.applyTLS(&opt); err != nil {
		return rueidis.ClientOption{}, err
	}
	// rueidis turns client-side caching on by default (CLIENT TRACKING);
	// windowstore never uses it, and some proxies and ACLs refuse it.
	opt.DisableCache = true
	opt.ConnWriteTimeout = g.timeout
	return opt, nil
}

// addrURL turns an address into a URL for rueidis.ParseURL: URLs of the schemes
// rueidis knows pass through; host:port, [ipv6]:port and a bare host (port
// 6379) become redis:// URLs. The error never repeats the address.
func addrURL(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty address; " + addrWant)
	}
	if scheme, _, ok := strings.Cut(s, "://"); ok {
		switch strings.ToLower(scheme) {
		case "redis", "rediss", "unix", "valkey", "valkeys":
			return s, nil
		}
		return "", errors.New("not a redis://, rediss:// or unix:// URL; " + addrWant)
	}
	if strings.Contains(s, "@") {
		return "", errors.New("credentials need a URL: want redis://USER:PASSWORD@host:port")
	}
	if strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") {
		return "", errors.New("a socket path needs a URL: want unix://PATH")
	}
	host, port := s, defaultPort
	switch {
	case strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
		host = s[1 : len(s)-1]
	case net.ParseIP(s) != nil && strings.Contains(s, ":"):
		return "", fmt.Errorf("an IPv6 address needs brackets: want [%s]:port", s)
	case strings.Contains(s, ":"):
		h, p, err := net.SplitHostPort(s)
		if err != nil {
			return "", errors.New("not host:port; " + addrWant)
		}
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("port %q is not a number from 1 to 65535; %s", p, addrWant)
		}
		host, port = h, p
	}
	if !validHost(host) {
		return "", errors.New("not a host name or address; " + addrWant)
	}
	// A URL spells an IPv6 zone's "%" as "%25".
	return "redis://" + net.JoinHostPort(strings.ReplaceAll(host, "%", "%25"), port), nil
}

// validHost accepts host names and IP addresses (IPv6 without brackets, with
// or without a zone).
func validHost(h string) bool {
	if h == "" {
		return false
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

// connect makes a client for the address. Errors never repeat the password.
func connect(g *globals) (rueidis.Client, error) {
	opt, err := g.clientOption()
	if err != nil {
		return nil, err
	}
	addr, _ := g.address()
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %s", redact(addr), scrub(err.Error(), addr))
	}
	return c, nil
}

// applyTLS adds the --tls-* files to a rediss:// client option.
func (g *globals) applyTLS(opt *rueidis.ClientOption) error {
	if g.tlsCA == "" && g.tlsCert == "" && g.tlsKey == "" {
		return nil
	}
	if opt.TLSConfig == nil {
		return usagef("--tls-ca, --tls-cert and --tls-key need a rediss:// address")
	}
	if (g.tlsCert == "") != (g.tlsKey == "") {
		return usagef("--tls-cert and --tls-key go together")
	}
	if g.tlsCA != "" {
		pem, err := os.ReadFile(g.tlsCA)
		if err != nil {
			return usagef("--tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return usagef("--tls-ca %s: no PEM certificate in it", g.tlsCA)
		}
		opt.TLSConfig.RootCAs = pool
	}
	if g.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(g.tlsCert, g.tlsKey)
		if err != nil {
			return usagef("--tls-cert/--tls-key: %v", err)
		}
		opt.TLSConfig.Certificates = []tls.Certificate{cert}
	}
	return nil
}

// redact hides the password of an address, URL or not: whatever stands between
// the first ':' of the user information and its last '@' becomes "xxxxx". It
// does not parse the address, so it also works on addresses that do not parse.
func redact(addr string) string {
	if from, to, ok := passwordAt(addr); ok {
		return addr[:from] + "xxxxx" + addr[to:]
	}
	return addr
}

// passwordAt finds the password in an address: addr[from:to].
func passwordAt(addr string) (from, to int, ok bool) {
	start := 0
	if i := strings.Index(addr, "://"); i >= 0 {
		start = i + 3
	}
	at := strings.LastIndex(addr, "@")
	if at < start {
		return 0, 0, false
	}
	colon := strings.Index(addr[start:at], ":")
	if colon < 0 {
		return 0, 0, false // a user name alone
	}
	return start + colon + 1, at, true
}

// scrub removes an address's password from a message: whole, and in the
// percent-decoded form a URL parser may quote.
func scrub(msg, addr string) string {
	msg = strings.ReplaceAll(msg, addr, redact(addr))
	if from, to, ok := passwordAt(addr); ok && to > from {
		p := addr[from:to]
		msg = strings.ReplaceAll(msg, p, "xxxxx")
		if d, err := url.PathUnescape(p); err == nil && d != "" {
			msg = strings.ReplaceAll(msg, d, "xxxxx")
		}
	}
	return msg
}
