// Package redisaddr turns the server addresses windowstore's commands take
// (host:port, [ipv6]:port, a bare host, redis://, rediss://, valkey:// and
// unix:// URLs; a cluster node's address reaches the whole cluster) into
// rueidis client options, with TLS files, and keeps passwords out of messages.
// windowctl and windowstored share it, so that both take the same --addr.
package redisaddr

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
	// Default is the address used when none is given.
	Default = "127.0.0.1:6379"
	// Env is the environment variable that gives the address when no flag does.
	Env         = "WINDOWSTORE_ADDR"
	defaultPort = "6379"
	want        = "want host:port or redis://host:port"
)

// Parse turns an address into a client option. Its errors quote the address
// with its password hidden, and never repeat the password.
//
// The option has client-side caching off: windowstore never uses it, and some
// proxies and ACLs refuse CLIENT TRACKING.
func Parse(addr string) (rueidis.ClientOption, error) {
	u, err := URL(addr)
	if err != nil {
		return rueidis.ClientOption{}, fmt.Errorf("%q: %s", Redact(addr), Scrub(err.Error(), addr))
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
		return rueidis.ClientOption{}, fmt.Errorf("%q: not a valid URL%s; %s", Redact(addr), why, want)
	}
	opt.DisableCache = true
	return opt, nil
}

// URL turns an address into a URL for rueidis.ParseURL: URLs of the schemes
// rueidis knows pass through; host:port, [ipv6]:port and a bare host (port
// 6379) become redis:// URLs. The error never repeats the address.
func URL(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty address; " + want)
	}
	if scheme, _, ok := strings.Cut(s, "://"); ok {
		switch strings.ToLower(scheme) {
		case "redis", "rediss", "unix", "valkey", "valkeys":
			return s, nil
		}
		return "", errors.New("not a redis://, rediss:// or unix:// URL; " + want)
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
			return "", errors.New("not host:port; " + want)
		}
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("port %q is not a number from 1 to 65535; %s", p, want)
		}
		host, port = h, p
	}
	if !validHost(host) {
		return "", errors.New("not a host name or address; " + want)
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

// TLSFiles are the PEM files of a rediss:// connection: the CA that signed the
// server's certificate, and a client certificate with its key. The zero value
// adds nothing.
type TLSFiles struct{ CA, Cert, Key string }

// Apply adds the files to a rediss:// client option. Its errors name the
// --tls-ca, --tls-cert and --tls-key flags that give the files.
func (f TLSFiles) Apply(opt *rueidis.ClientOption) error {
	if f == (TLSFiles{}) {
		return nil
	}
	if opt.TLSConfig == nil {
		return errors.New("--tls-ca, --tls-cert and --tls-key need a rediss:// address")
	}
	if (f.Cert == "") != (f.Key == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return fmt.Errorf("--tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--tls-ca %s: no PEM certificate in it", f.CA)
		}
		opt.TLSConfig.RootCAs = pool
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %v", err)
		}
		opt.TLSConfig.Certificates = []tls.Certificate{cert}
	}
	return nil
}

// Connect makes a client. Its error names the address with the password
// hidden, and never repeats the password.
func Connect(opt rueidis.ClientOption, addr string) (rueidis.Client, error) {
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %s", Redact(addr), Scrub(err.Error(), addr))
	}
	return c, nil
}

// Redact hides the password of an address, URL or not: whatever stands between
// the first ':' of the user information and its last '@' becomes "xxxxx". It
// does not parse the address, so it also works on addresses that do not parse.
func Redact(addr string) string {
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

// Scrub removes an address's password from a message: whole, and in the
// percent-decoded form a URL parser may quote.
func Scrub(msg, addr string) string {
	msg = strings.ReplaceAll(msg, addr, Redact(addr))
	if from, to, ok := passwordAt(addr); ok && to > from {
		p := addr[from:to]
		msg = strings.ReplaceAll(msg, p, "xxxxx")
		if d, err := url.PathUnescape(p); err == nil && d != "" {
			msg = strings.ReplaceAll(msg, d, "xxxxx")
		}
	}
	return msg
}
