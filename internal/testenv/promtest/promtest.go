// Package promtest runs a real Prometheus (the Debian package
// prometheus; `make deps` installs it through scripts/ensure-promtool) on
// a loopback port, scraping exporters a test controls every second, for
// the tests of the Prometheus signals. Tests only.
package promtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// BasicUser and BasicPassword are the credentials a Server started with
// Options.BasicAuth accepts; basicHash is the password's bcrypt hash
// (cost 4), as Prometheus's web configuration takes it.
const (
	BasicUser     = "throttled"
	BasicPassword = "throttled-basic-pass"
	basicHash     = "$2b$04$CaRW0QUsOFut9anB0JEwGOznBOP1H6egG2eQEDt4wpKf12zXgvTmq"
)

// Options say what a Server scrapes and how it is reached.
type Options struct {
	// Targets are host:port addresses scraped every second (job "app").
	Targets []string
	// BasicAuth makes the API ask for BasicUser and BasicPassword.
	BasicAuth bool
	// TLS serves https with a certificate of a CA of the Server's own,
	// written to Server.CAFile.
	TLS bool
}

// Server is a running Prometheus.
type Server struct {
	// URL is its base URL: http://127.0.0.1:port, or https with TLS.
	URL string
	// CAFile is the PEM file of the CA that signed its certificate (TLS).
	CAFile string
	cmd    *exec.Cmd
	client *http.Client
	// web is its web configuration file (BasicAuth or TLS), and tls that
	// file's TLS part.
	web, tls string
}

// Start runs a Prometheus until the test ends, and waits for it to be
// ready. A missing binary fails the test: run `make deps`.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("no prometheus on PATH; `make deps` installs the Debian package (scripts/ensure-promtool)")
	}
	dir := t.TempDir()
	var targets []string
	for _, x := range o.Targets {
		targets = append(targets, fmt.Sprintf("%q", x))
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: app\n    static_configs:\n      - targets: [%s]\n", strings.Join(targets, ", "))
	write(t, filepath.Join(dir, "prometheus.yml"), cfg)
	addr := freeAddr(t)
	args := []string{"--config.file=" + filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr, "--log.level=warn"}
	s := &Server{URL: "http://" + addr, client: &http.Client{Timeout: 2 * time.Second}}
	if o.BasicAuth || o.TLS {
		var web strings.Builder
		if o.TLS {
			s.CAFile = selfSigned(t, dir)
			web.WriteString(fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")))
			s.URL = "https://" + addr
			pool := x509.NewCertPool()
			pem, _ := os.ReadFile(s.CAFile)
			pool.AppendCertsFromPEM(pem)
			s.client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
		}
		if o.TLS {
			s.tls = web.String()
		}
		if o.BasicAuth {
			web.WriteString(fmt.Sprintf("basic_auth_users:\n  %s: %s\n", BasicUser, basicHash))
		}
		s.web = filepath.Join(dir, "web.yml")
		write(t, s.web, web.String())
		args = append(args, "--web.config.file="+s.web)
	}
	s.cmd = exec.Command(bin, args...)
	var out strings.Builder
	s.cmd.Stdout, s.cmd.Stderr = &out, &out
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out.String())
		}
	})
	pgtest.Eventually(t, 30*time.Second, func() error {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/-/ready", nil)
		if o.BasicAuth {
			req.SetBasicAuth(BasicUser, BasicPassword)
		}
		resp, err := s.client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("prometheus not ready: %s", resp.Status)
		}
		return nil
	})
	return s
}

// Stop kills the Prometheus (a test of it being down); Start's cleanup
// calls it too.
func (s *Server) Stop() {
	if s.cmd.Process != nil && s.cmd.ProcessState == nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// WaitSeries polls expr on an unauthenticated Server until it gives n
// series, for up to timeout.
func (s *Server) WaitSeries(t testing.TB, expr string, n int, timeout time.Duration) {
	t.Helper()
	pgtest.Eventually(t, timeout, func() error {
		got, err := s.Series(expr)
		if err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("%s: %d series, want %d", expr, got, n)
		}
		return nil
	})
}

// Series runs expr as an instant query and returns how many series it
// gave (1 for a scalar).
func (s *Server) Series(expr string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Status, Error string
		Data          struct {
			ResultType string            `json:"resultType"`
			Result     []json.RawMessage `json:"result"`
		}
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return 0, fmt.Errorf("%w: %s", err, b)
	}
	if out.Status != "success" {
		return 0, fmt.Errorf("query %s: %s", expr, out.Error)
	}
	if out.Data.ResultType == "scalar" {
		return 1, nil
	}
	return len(out.Data.Result), nil
}

// Exporter serves a registry's metrics over HTTP, as an application
// would, until the test ends or Close.
type Exporter struct {
	// Addr is host:port, a Prometheus target.
	Addr string
	srv  *httptest.Server
}

// Export serves reg's metrics at /metrics.
func Export(t testing.TB, reg *prometheus.Registry) *Exporter {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return &Exporter{Addr: strings.TrimPrefix(srv.URL, "http://"), srv: srv}
}

// Close stops serving: the next scrapes fail, and Prometheus marks the
// target's series stale.
func (e *Exporter) Close() { e.srv.Close() }

func write(t testing.TB, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	// Under the ephemeral range, so no outgoing connection takes it
	// before Prometheus binds it (pgcluster.FreePorts).
	ports, err := pgcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
}

// selfSigned writes a CA (ca.pem) and a certificate for 127.0.0.1 it
// signed (cert.pem, key.pem) to dir, and returns ca.pem's path.
func selfSigned(t testing.TB, dir string) string {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "throttled test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	write(t, filepath.Join(dir, "ca.pem"), string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})))
	write(t, filepath.Join(dir, "cert.pem"), string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER})))
	write(t, filepath.Join(dir, "key.pem"), string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))
	return filepath.Join(dir, "ca.pem")
}

// RotateBasicAuth makes a Server started with Options.BasicAuth accept
// another user only, as when an operator rotates its credentials:
// Prometheus reads its web configuration on every request, so from now on
// it refuses BasicUser and BasicPassword with 401.
func (s *Server) RotateBasicAuth(t testing.TB) {
	t.Helper()
	if s.web == "" {
		t.Fatal("promtest: RotateBasicAuth on a Server without BasicAuth")
	}
	write(t, s.web, s.tls+fmt.Sprintf("basic_auth_users:\n  someone-else: %s\n", basicHash))
}

// PID is the Prometheus process's ID.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Hang stops Prometheus with SIGSTOP (a hung Prometheus: the kernel still
// accepts connections on its port, nothing answers) and returns once
// every one of its threads is stopped. The kernel stops a process's
// threads only when the one it chose to take the signal next runs; on a
// loaded machine the others answered a query in between. Resume undoes
// it.
func (s *Server) Hang(t testing.TB) {
	t.Helper()
	pid := s.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("promtest: SIGSTOP: %v", err)
	}
	pgtest.Eventually(t, 10*time.Second, func() error { return allStopped(pid) })
}

// Resume sends SIGCONT to a hung Prometheus.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	if err := syscall.Kill(s.PID(), syscall.SIGCONT); err != nil {
		t.Fatalf("promtest: SIGCONT: %v", err)
	}
}

// allStopped is nil once every thread of pid is stopped (state T in its
// /proc stat), else an error naming one that is not.
func allStopped(pid int) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return err
		}
		// The state follows the command, which is in parentheses and
		// may hold spaces and parentheses of its own.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) {
			return fmt.Errorf("thread %s: stat %q", task.Name(), b)
		}
		if state := b[i+2]; state != 'T' && state != 't' {
			return fmt.Errorf("thread %s of Prometheus (%d) is in state %c, not stopped", task.Name(), pid, state)
		}
	}
	return nil
}
