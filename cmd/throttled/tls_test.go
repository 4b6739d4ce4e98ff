package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// selfSigned writes a certificate for 127.0.0.1 and its key under dir
// and returns their paths and a pool trusting the certificate.
func selfSigned(t *testing.T, dir string) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "throttled test"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

// With tls_cert and tls_key, throttled run serves HTTPS only: a client
// trusting the certificate gets answers, one that does not is refused by
// its own TLS check, and plain HTTP gets no API answer.
func TestRunServesTLS(t *testing.T) {
	c := pgtest.Cluster(t)
	dir := t.TempDir()
	certPath, keyPath, pool := selfSigned(t, dir)
	addr := freeAddr(t)
	path := filepath.Join(dir, "throttled.hcl")
	src := fmt.Sprintf(`primary {
  dsn              = %q
  coordination_dsn = %q
  cores            = 2
}
listen {
  address    = %q
  tls_cert   = %q
  tls_key    = %q
  open_reads = true
}
`, c.Primary.DSN(pgcluster.RoleMonitor), c.Primary.DSN(pgcluster.RoleAdmin), addr, certPath, keyPath)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--config", path, "--log-level", "off"}, io.Discard, io.Discard)
	}()
	defer func() { cancel(); <-done }()

	trusting := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://" + addr
	pgtest.Eventually(t, 20*time.Second, func() error {
		resp, err := trusting.Get(base + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz over TLS: %d", resp.StatusCode)
		}
		return nil
	})
	resp, err := trusting.Get(base + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		t.Fatalf("status over TLS: %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	// A client without the certificate in its roots refuses the server.
	var unknown x509.UnknownAuthorityError
	if _, err := (&http.Client{Timeout: 5 * time.Second}).Get(base + "/readyz"); !errors.As(err, &unknown) {
		t.Fatalf("untrusted certificate: %v; want an unknown-authority error", err)
	}
	// Plain HTTP reaches no handler: Go's TLS server answers 400 to it.
	plain, err := http.Get("http://" + addr + "/v1/status")
	if err != nil {
		return // refused at the connection: also no API answer
	}
	plain.Body.Close()
	if plain.StatusCode != http.StatusBadRequest {
		t.Fatalf("plain HTTP to the TLS listener: %d; want 400", plain.StatusCode)
	}
}
