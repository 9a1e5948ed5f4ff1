package httplimit

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/windowstore/windowstore/internal/keyspace"
)

// A KeyFunc names the counter a request is charged to, such as the client's
// IP or its API key. An error refuses the request with 400 Bad Request, since a
// key that cannot be named is the client's fault (503 is for a server that
// fails). The response body says why only for errors made by BadRequest (the
// key functions of this package make such errors); any other error answers
// "bad request" alone, so that nothing internal leaks. The WithOnError hook
// sees the error either way.
type KeyFunc func(r *http.Request) (string, error)

// ErrNoKey reports a request the key function could find no key in. Every
// error of BadRequest wraps it.
var ErrNoKey = errors.New("httplimit: no key in the request")

// BadRequest returns an error for a KeyFunc to refuse a request with: the
// middleware answers 400 Bad Request, with "bad request: " + reason as the
// body. Keep the reason short and free of secrets: the client sees it.
func BadRequest(reason string) error { return &keyError{reason: reason} }

// keyError is a request refused for its key: status 0 answers 400, else
// status.
type keyError struct {
	reason string
	status int
}

func (e *keyError) Error() string { return "httplimit: no key in the request: " + e.reason }
func (e *keyError) Unwrap() error { return ErrNoKey }

// reasonOf is the part of a key error the client may see.
func reasonOf(err error) string {
	var ke *keyError
	if errors.As(err, &ke) {
		return ke.reason
	}
	return "no key in the request"
}

// statusOf is the status that answers a key error: 400, or the key error's
// own (431 for a header too long to be a key).
func statusOf(err error) int {
	var ke *keyError
	if errors.As(err, &ke) && ke.status != 0 {
		return ke.status
	}
	return http.StatusBadRequest
}

// ClientIP keys requests by the client's IP address. The peer address
// (RemoteAddr) is the client unless it is one of the trusted proxies; then the
// X-Forwarded-For chain is read from the right, skipping trusted proxies, and
// the first address that is not one is the client. Addresses further left were
// written by the client itself and are never believed. With no trusted
// proxies, X-Forwarded-For is ignored entirely.
//
// An entry that is not an IP address ends the walk: the last trusted hop's
// address is used, since that proxy is misconfigured or the header was forged
// before it. IPv4-mapped IPv6 addresses are unmapped.
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, error) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		peer, err := netip.ParseAddr(host)
		if err != nil {
			return "", BadRequest(fmt.Sprintf("peer address %q is not an IP", r.RemoteAddr))
		}
		peer = peer.Unmap()
		if len(trusted) == 0 || !isTrusted(peer) {
			return "ip:" + peer.String(), nil
		}
		client := peer
		hops := r.Header.Values("X-Forwarded-For")
		for i := len(hops) - 1; i >= 0; i-- {
			parts := strings.Split(hops[i], ",")
			for j := len(parts) - 1; j >= 0; j-- {
				a, err := netip.ParseAddr(strings.TrimSpace(parts[j]))
				if err != nil {
					return "ip:" + client.String(), nil
				}
				client = a.Unmap()
				if !isTrusted(client) {
					return "ip:" + client.String(), nil
				}
			}
		}
		return "ip:" + client.String(), nil
	}
}

// Header keys requests by a header's value, such as an API key. A request
// without the header has no key (ErrNoKey); one whose value is too long to
// name a counter (keyspace.MaxKeyLen, 1,024 bytes, with the rule's name) is
// answered 431 Request Header Fields Too Large.
func Header(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", BadRequest("no " + name + " header")
		}
		if len(v) > keyspace.MaxKeyLen-len("h:") {
			return "", &keyError{reason: fmt.Sprintf("the %s header is %d bytes, more than a key can be", name, len(v)),
				status: http.StatusRequestHeaderFieldsTooLarge}
		}
		return "h:" + v, nil
	}
}

// PathValue keys requests by a path wildcard of the route pattern (Go 1.22
// ServeMux patterns, such as "/users/{id}"): PathValue("id").
func PathValue(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := r.PathValue(name)
		if v == "" {
			return "", BadRequest(fmt.Sprintf("no path value %q", name))
		}
		return "p:" + v, nil
	}
}
