package tests

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// certs makes, at test time, a CA and a server and a client certificate
// signed by it, as PEM files in dir.
func certs(t *testing.T, dir string) {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		return k
	}
	write := func(name, typ string, der []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o644))
	}
	writeKey := func(name string, k *ecdsa.PrivateKey) {
		der, err := x509.MarshalECPrivateKey(k)
		require.NoError(t, err)
		write(name, "EC PRIVATE KEY", der)
	}
	now := time.Now()
	caKey := key()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "windowstore test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	write("ca.crt", "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) {
		k := key()
		c := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, c, caCert, &k.PublicKey, caKey)
		require.NoError(t, err)
		write(name+".crt", "CERTIFICATE", der)
		writeKey(name+".key", k)
	}
	leaf("server", 2, x509.ExtKeyUsageServerAuth)
	leaf("client", 3, x509.ExtKeyUsageClientAuth)
}

// TestTLS runs the store and windowctl over TLS with a CA file and client
// certificates, against a real TLS-only Redis with certificates made at test
// time; and checks that a client without a certificate, or without the CA, is
// refused.
func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certs(t, dir)
	files := map[string]string{}
	for _, f := range []string{"ca.crt", "server.crt", "server.key"} {
		files[filepath.Join(dir, f)] = "/tls/" + f
	}
	srv := harness.FreshTLS(t, harness.Redis70, files,
		"--tls-cert-file", "/tls/server.crt", "--tls-key-file", "/tls/server.key",
		"--tls-ca-cert-file", "/tls/ca.crt", "--tls-auth-clients", "yes")
	addr := srv.Addr

	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"))
	require.NoError(t, err)

	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true,
		TLSConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	require.NoError(t, err)
	defer c.Close()
	ctx := ctxT(t)
	s, err := store.New(ctx, c, store.Window{Length: time.Minute, Bucket: time.Second})
	require.NoError(t, err)
	n, err := s.Add(ctx, "tls", 4)
	require.NoError(t, err)
	require.EqualValues(t, 4, n)

	// No client certificate: the server refuses the handshake.
	_, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true,
		TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
	require.Error(t, err)

	// windowctl with the same files.
	url := "rediss://" + addr
	tlsArgs := []string{"--addr", url, "--tls-ca", filepath.Join(dir, "ca.crt"),
		"--tls-cert", filepath.Join(dir, "client.crt"), "--tls-key", filepath.Join(dir, "client.key")}
	out, errs, code := ctlRaw(t, append(tlsArgs, "--json", "sum", "tls")...)
	require.Zero(t, code, errs)
	require.Equal(t, map[string]any{"key": "tls", "sum": 4.0}, jsonLine(t, out))
	// Without the CA the server's certificate is not trusted.
	_, errs, code = ctlRaw(t, "--addr", url, "--tls-cert", filepath.Join(dir, "client.crt"), "--tls-key", filepath.Join(dir, "client.key"), "sum", "tls")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "certificate")
	// TLS files with a plain address are a usage error.
	_, errs, code = ctlRaw(t, "--addr", "redis://"+addr, "--tls-ca", filepath.Join(dir, "ca.crt"), "sum", "tls")
	require.Equal(t, 2, code, errs)
}

// TestCredentialsNeverPrinted: a password in the address never reaches
// windowctl's output or errors, whether it is right or wrong.
func TestCredentialsNeverPrinted(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	admin := srv.Client(t)
	ctx := context.Background()
	const pass = "Tr0ub4dor-and-3"
	require.NoError(t, admin.Do(ctx, admin.B().Arbitrary("ACL", "SETUSER").Args("cred-user", "reset", "on", ">"+pass, "~*", "+@all").Build()).Error())
	t.Cleanup(func() {
		_ = admin.Do(context.Background(), admin.B().Arbitrary("ACL", "DELUSER").Args("cred-user").Build()).Error()
	})
	for _, p := range []string{pass, "wrong-" + pass} {
		url := "redis://cred-user:" + p + "@" + srv.Addr
		for _, args := range [][]string{{"--json", "detect"}, {"add", "k"}, {"--json", "inspect", "k"}, {"demo"}} {
			out, errs, _ := ctlRaw(t, append([]string{"--addr", url}, args...)...)
			require.NotContains(t, out+errs, p, "%v printed the password", args)
		}
	}
	_, errs, code := ctlRaw(t, "--addr", "redis://cred-user:wrong@"+srv.Addr, "sum", "k")
	require.Equal(t, 1, code)
	require.True(t, strings.Contains(errs, "WRONGPASS") || strings.Contains(errs, "invalid"), errs)
}
