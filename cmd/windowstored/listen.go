package main

import (
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

// listenFlags are the listeners' own security: TLS with cert and key,
// client certificates required and checked against clientCA (mTLS), and a
// bearer token for the HTTP API's calls.
type listenFlags struct {
	cert, key, clientCA, tokenFile string
}

// tlsConfig is the listeners' TLS configuration, nil for plain TCP.
func (l listenFlags) tlsConfig() (*tls.Config, error) {
	switch {
	case l.cert == "" && l.key == "" && l.clientCA == "":
		return nil, nil
	case l.cert == "" || l.key == "":
		return nil, errors.New("--listen-cert and --listen-key go together")
	}
	pair, err := tls.LoadX509KeyPair(l.cert, l.key)
	if err != nil {
		return nil, fmt.Errorf("--listen-cert/--listen-key: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if l.clientCA != "" {
		pem, err := os.ReadFile(l.clientCA)
		if err != nil {
			return nil, fmt.Errorf("--listen-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--listen-client-ca %s: no PEM certificate in it", l.clientCA)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// token is the bearer token of --api-token-file (its first line, trimmed),
// "" for none.
func (l listenFlags) token() (string, error) {
	if l.tokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(l.tokenFile)
	if err != nil {
		return "", fmt.Errorf("--api-token-file: %w", err)
	}
	tok, _, _ := strings.Cut(string(b), "\n")
	if tok = strings.TrimSpace(tok); len(tok) < 16 {
		return "", fmt.Errorf("--api-token-file %s: the token is %d bytes: want at least 16", l.tokenFile, len(tok))
	}
	return tok, nil
}

// listen is net.Listen, with TLS when c is not nil.
func listen(addr string, c *tls.Config) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil || c == nil {
		return lis, err
	}
	return tls.NewListener(lis, c), nil
}

// requireToken answers 401 to a call without "Authorization: Bearer
// token"; /healthcheck and /metrics stay open, for probes and scrapers.
func requireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthcheck" || r.URL.Path == "/metrics" {
			next.ServeHTTP(w, r)
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="windowstored"`)
			jsonError(w, http.StatusUnauthorized, "a bearer token is required: Authorization: Bearer TOKEN (--api-token-file)")
			return
		}
		next.ServeHTTP(w, r)
	})
}
