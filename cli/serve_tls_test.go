package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/pgtest"
)

// testCA is a certificate authority of a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a leaf certificate for hosts (server) or for a client, and
// returns its chain and key as PEM.
func (ca *testCA) issue(t *testing.T, serial int64, client bool, hosts ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "strata test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestServeTLS: with a certificate, every listener speaks TLS 1.2 or later
// only; the metrics and pprof listeners require a client certificate of
// STRATA_OPS_TLS_CLIENT_CA; net/http's own answers keep the API's error
// shape over TLS; a renewed certificate is served without a restart, and a
// broken one never replaces it.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	ca, opsCA := newTestCA(t, "strata test CA"), newTestCA(t, "ops CA")
	crt, key := ca.issue(t, 100, false, "127.0.0.1", "localhost")
	writeFile(t, filepath.Join(dir, "tls.crt"), crt)
	writeFile(t, filepath.Join(dir, "tls.key"), key)
	writeFile(t, filepath.Join(dir, "ops-ca.pem"), opsCA.pem)
	metricsLn, _ := net.Listen("tcp", "127.0.0.1:0")
	pprofLn, _ := net.Listen("tcp", "127.0.0.1:0")
	metricsAddr, pprofAddr := metricsLn.Addr().String(), pprofLn.Addr().String()
	metricsLn.Close()
	pprofLn.Close()
	base, _, stop := startServe(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "STRATA_DATA_DIR": t.TempDir(), "STRATA_LOG_LEVEL": "warn",
		"STRATA_JWT_SECRET": "serve-tls-test-secret-0123456789abcdef",
		"STRATA_TLS_CERT":   filepath.Join(dir, "tls.crt"), "STRATA_TLS_KEY": filepath.Join(dir, "tls.key"),
		"STRATA_OPS_TLS_CLIENT_CA": filepath.Join(dir, "ops-ca.pem"),
		"STRATA_METRICS_ADDR":      metricsAddr, "STRATA_PPROF_ADDR": pprofAddr})
	defer func() {
		if code := stop(); code != exitOK {
			t.Errorf("serve exited %d", code)
		}
	}()
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("serve announced %s, want https", base)
	}
	host := strings.TrimPrefix(base, "https://")
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.pem)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := client.Get(base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became ready over TLS: %v", base, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	serial := func(addr string, cfg *tls.Config) (*big.Int, error) {
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		if err := c.Handshake(); err != nil {
			return nil, err
		}
		return c.ConnectionState().PeerCertificates[0].SerialNumber, nil
	}
	if _, err := serial(host, &tls.Config{RootCAs: roots, MaxVersion: tls.VersionTLS11, MinVersion: tls.VersionTLS10}); err == nil {
		t.Error("a TLS 1.1 handshake succeeded")
	}
	if s, err := serial(host, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12}); err != nil || s.Int64() != 100 {
		t.Errorf("TLS 1.2: serial %v, %v", s, err)
	}
	res, err := http.Get("http://" + host + "/readyz")
	if err == nil {
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP on the TLS listener was served: %s", body)
		}
	}

	// net/http's own answer (a malformed request line) keeps the error shape.
	c, err := tls.Dial("tcp", host, &tls.Config{RootCAs: roots})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("GARBAGE\r\n\r\n"))
	raw, _ := io.ReadAll(bufio.NewReader(c))
	c.Close()
	if !bytes.Contains(raw, []byte(`"code":"invalid_request"`)) {
		t.Errorf("a malformed request over TLS: %q, want the API's error shape", raw)
	}

	// The operator listeners: TLS, and a client certificate of the ops CA.
	for _, addr := range []string{metricsAddr, pprofAddr} {
		if _, err := serial(addr, &tls.Config{RootCAs: roots}); err == nil {
			// TLS 1.3 reports the refusal on the first read.
			cc, _ := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots})
			if cc != nil {
				_, _ = cc.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
				if _, rerr := cc.Read(make([]byte, 1)); rerr == nil {
					t.Errorf("%s served a client without a certificate", addr)
				}
				cc.Close()
			}
		}
		ccrt, ckey := opsCA.issue(t, 7, true)
		cert, err := tls.X509KeyPair(ccrt, ckey)
		if err != nil {
			t.Fatal(err)
		}
		mclient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}}}
		path := "/metrics"
		if addr == pprofAddr {
			path = "/debug/pprof/"
		}
		res, err := mclient.Get("https://" + addr + path)
		if err != nil {
			t.Fatalf("%s with a client certificate: %v", addr, err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("%s%s with a client certificate: %d", addr, path, res.StatusCode)
		}
	}

	// Renewal: a broken pair is not taken; a good one is, without a restart.
	writeFile(t, filepath.Join(dir, "tls.crt"), []byte("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n"))
	time.Sleep(1100 * time.Millisecond)
	if s, err := serial(host, &tls.Config{RootCAs: roots}); err != nil || s.Int64() != 100 {
		t.Fatalf("after a broken renewal: serial %v, %v; want the previous certificate", s, err)
	}
	crt2, key2 := ca.issue(t, 200, false, "127.0.0.1")
	writeFile(t, filepath.Join(dir, "tls.key"), key2)
	writeFile(t, filepath.Join(dir, "tls.crt"), crt2)
	deadline = time.Now().Add(10 * time.Second)
	for {
		s, err := serial(host, &tls.Config{RootCAs: roots})
		if err == nil && s.Int64() == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the renewed certificate was not served: serial %v, %v", s, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestServeVerifiesTheDatabaseCertificate: with sslmode=verify-full in
// DATABASE_URL, every connection strata opens (the owner's, and the logins
// it provisions from it) uses TLS and checks the server's certificate; a
// server whose certificate another CA signed is refused at start.
func TestServeVerifiesTheDatabaseCertificate(t *testing.T) {
	srv := pgtest.StartPrivate(t, nil)
	ca := newTestCA(t, "database CA")
	crt, key := ca.issue(t, 1, false, "127.0.0.1")
	var st syscall.Stat_t
	if err := syscall.Stat(srv.DataDir(), &st); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"server.crt": crt, "server.key": key} {
		p := filepath.Join(srv.DataDir(), name)
		writeFile(t, p, b)
		if err := os.Chown(p, int(st.Uid), int(st.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for _, q := range []string{"ALTER SYSTEM SET ssl = on", "ALTER SYSTEM SET ssl_cert_file = 'server.crt'", "ALTER SYSTEM SET ssl_key_file = 'server.key'",
		"SELECT pg_reload_conf()", "CREATE DATABASE strata_tls"} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ca.pem"), ca.pem)
	writeFile(t, filepath.Join(dir, "other-ca.pem"), newTestCA(t, "another CA").pem)
	verifyFull := func(caFile string) string {
		return strings.Replace(srv.URLFor("strata_tls"), "sslmode=disable", "sslmode=verify-full&sslrootcert="+caFile, 1)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := pgx.Connect(ctx, verifyFull(filepath.Join(dir, "ca.pem")))
		if err == nil {
			c.Close(ctx)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL did not start TLS: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	var stderr bytes.Buffer
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	code := run(rctx, []string{"serve", "--addr", "127.0.0.1:0"}, testEnv(map[string]string{"DATABASE_URL": verifyFull(filepath.Join(dir, "other-ca.pem")),
		"STRATA_DATA_DIR": t.TempDir(), "STRATA_JWT_SECRET": "serve-tls-test-secret-0123456789abcdef"}), io.Discard, &stderr)
	if code == exitOK || !strings.Contains(stderr.String(), "certificate") {
		t.Fatalf("serve against a database whose certificate another CA signed: exit %d, %s", code, stderr.String())
	}

	base, _, stop := startServe(t, map[string]string{"DATABASE_URL": verifyFull(filepath.Join(dir, "ca.pem")), "STRATA_DATA_DIR": t.TempDir(),
		"STRATA_LOG_LEVEL": "warn", "STRATA_JWT_SECRET": "serve-tls-test-secret-0123456789abcdef"})
	defer stop()
	waitReady(t, base)
	var plain, encrypted int
	if err := admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT s.ssl), count(*) FILTER (WHERE s.ssl)
		FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.datname = 'strata_tls'`).Scan(&plain, &encrypted); err != nil {
		t.Fatal(err)
	}
	if plain != 0 || encrypted == 0 {
		t.Fatalf("strata's connections: %d without TLS, %d with", plain, encrypted)
	}
	t.Logf("strata's connections to the database: %d, all TLS", encrypted)
}
