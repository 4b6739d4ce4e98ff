package replay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// prom.go: the application's own latency, as a user's service exports it.
// The foreground's generator observes each transaction's server part
// (Second.Server: what the application of a real primary would time) into
// a Prometheus histogram on a loopback exporter, and a real Prometheus
// (the Debian package) scrapes it every second. The adaptive-app policy
// paces on its p99 through the product's own Prometheus signal.

// AppLatencyMetric is the foreground's latency histogram's name.
const AppLatencyMetric = "replay_foreground_latency_seconds"

// AppRateWindow is the rate() window of adaptive-app's queries; with the
// 1 s scrape it makes the signal's delay (AppDelay).
const (
	AppRateWindow = "5s"
	AppDelay      = 6 * time.Second
)

// AppQuery and AppTraffic are adaptive-app's queries: the p99 of the
// foreground's latency and its rate.
var (
	AppQuery   = fmt.Sprintf("histogram_quantile(0.99, sum(rate(%s_bucket[%s])) by (le))", AppLatencyMetric, AppRateWindow)
	AppTraffic = fmt.Sprintf("sum(rate(%s_count[%s]))", AppLatencyMetric, AppRateWindow)
)

// AppSignalName is adaptive-app's Prometheus signal.
const AppSignalName signals.Name = "app_p99"

// AppRule is adaptive-app's rule on it: the target, 1.10 over the
// job-free baseline, required (blind is unsafe); a reading older than
// three scrapes and a read is stale.
var AppRule = throttle.Rule{Target: 1.10, Ratio: true, Required: true, MaxAge: 5 * time.Second}

// AppSignal is the product's Prometheus source reading the foreground's
// p99 from the Prometheus at url, as a user would configure it.
func AppSignal(url string) signals.PrometheusConfig {
	return signals.PrometheusConfig{Address: url, Timeout: 2 * time.Second, Signals: []signals.PrometheusSignal{{
		Name: AppSignalName, Query: AppQuery, Traffic: AppTraffic, MinTraffic: 1,
		Every: time.Second, Delay: AppDelay, Unit: signals.UnitSeconds, Baseline: signals.BaselineJobFree,
		Source: "replay adaptive-app",
	}}}
}

// labProm is the exporter and the Prometheus scraping it.
type labProm struct {
	// URL is Prometheus's base URL.
	URL      string
	hist     prometheus.Histogram
	exporter *http.Server
	cmd      *exec.Cmd
	done     chan error
	dir      string
}

// startLabProm starts the exporter and a Prometheus scraping it every
// second, and waits until Prometheus is ready.
func startLabProm(ctx context.Context) (*labProm, error) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		return nil, errors.New("replay: no prometheus on PATH (the Debian package; `make deps` installs it)")
	}
	reg := prometheus.NewRegistry()
	// Buckets 6.4 % apart from 0.2 ms to 2 s: histogram_quantile reads
	// within a bucket linearly, so a 1.10 ratio is resolved.
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: AppLatencyMetric,
		Help:    "The replay foreground's transactions' latency, server part, seconds.",
		Buckets: prometheus.ExponentialBucketsRange(0.0002, 2, 150)})
	reg.MustRegister(h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("replay: the foreground's exporter: %w", err)
	}
	p := &labProm{hist: h, exporter: &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}, done: make(chan error, 1)}
	go func() { _ = p.exporter.Serve(ln) }()
	port, err := freePort()
	if err != nil {
		p.stop()
		return nil, err
	}
	if p.dir, err = os.MkdirTemp("", "replay-prom-"); err != nil {
		p.stop()
		return nil, err
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: replay\n    static_configs:\n      - targets: [%q]\n", ln.Addr().String())
	if err := os.WriteFile(filepath.Join(p.dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		p.stop()
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p.URL = "http://" + addr
	p.cmd = exec.Command(bin, "--config.file="+filepath.Join(p.dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(p.dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	if err := p.cmd.Start(); err != nil {
		p.stop()
		return nil, fmt.Errorf("replay: start prometheus: %w", err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/-/ready", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case err := <-p.done:
			p.done <- err
			p.stop()
			return nil, fmt.Errorf("replay: prometheus exited before it was ready: %v", err)
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("replay: prometheus at %s not ready within 30s", p.URL)
		}
	}
}

// observe records one transaction's server part.
func (p *labProm) observe(d time.Duration) { p.hist.Observe(d.Seconds()) }

// stop ends Prometheus and the exporter, and removes Prometheus's data.
func (p *labProm) stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.exporter.Shutdown(sctx)
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
