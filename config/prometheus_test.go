package config

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/internal/testenv/promtest"
	"github.com/throttled/throttled/signals"
)

// promFile is smallest with a Prometheus signal on query, bound by a
// signal block; the prometheus_signal block is at line promLine.
func promFile(address, query, rule string) string {
	return smallest + fmt.Sprintf(`prometheus {
  address      = %q
  bearer_token = env("PROM_TOKEN")
}
prometheus_signal "api_p99" {
  query = %q
  unit  = "seconds"
}
signal "api_p99" {
%s
}
`, address, query, rule)
}

// promLine is the line of promFile's prometheus_signal block.
var promLine = strings.Count(smallest, "\n") + 5

func promGetenv(k string) string {
	if k == "PROM_TOKEN" {
		return "tok-6c1d9e2f7a3b5c48"
	}
	return getenv(k)
}

// The blocks read into the sampler's and the controller's configuration.
func TestPrometheusBlocksParse(t *testing.T) {
	c, err := Parse("throttled.hcl", []byte(promFile("http://127.0.0.1:9090", "x", `  target = 1.1
  critical = 2
  max_age = "10s"`)), promGetenv)
	if err != nil {
		t.Fatal(err)
	}
	p := c.Prometheus.PrometheusConfig
	if p.Address != "http://127.0.0.1:9090" || p.Timeout != 2*time.Second || p.BearerToken != "tok-6c1d9e2f7a3b5c48" || len(p.Signals) != 1 {
		t.Fatalf("prometheus: %+v", p)
	}
	s := p.Signals[0]
	if s.Name != "api_p99" || s.Baseline != signals.BaselineJobFree || s.Every != time.Second || s.Source != fmt.Sprintf("throttled.hcl:%d", promLine) {
		t.Errorf("signal: %+v", s)
	}
	r := c.Rules["api_p99"]
	if r.Target != 1.1 || r.Critical != 2 || !r.Ratio || !r.Required || r.MaxAge != 10*time.Second {
		t.Errorf("rule: %+v", r)
	}
	abs, err := Parse("throttled.hcl", []byte(promFile("http://127.0.0.1:9090", "x", `  target = 0.25
  baseline = "none"`)), promGetenv)
	if err != nil {
		t.Fatal(err)
	}
	if r := abs.Rules["api_p99"]; r.Ratio || r.Target != 0.25 || r.MaxAge != 19*time.Second {
		t.Errorf("baseline none: rule %+v, want an absolute target and max_age 2*every + timeout + 15s", r)
	}
}

// Without --live the blocks must be complete and their durations sane;
// each refusal names its file:line.
func TestPrometheusBlocksRefused(t *testing.T) {
	ok := promFile("http://127.0.0.1:9090", "x", "  target = 1.1")
	for _, tc := range []struct {
		name, src, want string
	}{
		{"signal without a prometheus block", smallest + "prometheus_signal \"a\" {\n  query = \"x\"\n}\n", "no prometheus block says where to read it"},
		{"prometheus block without a signal", smallest + "prometheus {\n  address = \"http://127.0.0.1:9090\"\n}\n", "no prometheus_signal block"},
		{"no query", strings.Replace(ok, `query = "x"`, `# no query`, 1), `"query" is required`},
		{"address with a password", strings.Replace(ok, "http://127.0.0.1:9090", "http://u:pw@127.0.0.1:9090", 1), "carries a user"},
		{"not http", strings.Replace(ok, "http://127.0.0.1:9090", "ftp://127.0.0.1", 1), "want an http or https URL"},
		{"timeout too long", strings.Replace(ok, "bearer_token =", "timeout = \"1m\"\n  bearer_token =", 1), "timeout 1m0s: at most 30s"},
		{"every too long", strings.Replace(ok, `unit  = "seconds"`, `every = "5m"`, 1), "every 5m0s: at most 1m0s"},
		{"bad duration", strings.Replace(ok, `unit  = "seconds"`, `every = "soon"`, 1), `every = "soon"`},
		{"max_age under every", strings.Replace(ok, "  target = 1.1", "  target = 1.1\n  max_age = \"500ms\"", 1), "must exceed the prometheus_signal's every"},
		{"ratio target under 1", strings.Replace(ok, "  target = 1.1", "  target = 0.9", 1), "must be above 1"},
		{"bad baseline", strings.Replace(ok, "  target = 1.1", "  target = 1.1\n  baseline = \"yesterday\"", 1), `baseline = "yesterday"`},
		{"min_traffic without traffic", strings.Replace(ok, `unit  = "seconds"`, `min_traffic = 1`, 1), "min_traffic without traffic"},
		{"named as a why", strings.ReplaceAll(ok, `"api_p99"`, `"stale"`), "is a word of a job's why"},
		{"baseline on a built-in signal", smallest + "signal \"primary_load\" {\n  target = 0.7\n  baseline = \"none\"\n}\n", "baseline is a prometheus_signal's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("throttled.hcl", []byte(tc.src), promGetenv)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "throttled.hcl:") {
				t.Fatalf("got %v, want an error at a file:line saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "tok-6c1d9e2f7a3b5c48") {
				t.Errorf("error %q shows the bearer token", err)
			}
		})
	}
}

// check-config --live and run read each query once on a real Prometheus
// and refuse the file as the sampler would fail the sample: naming the
// signal, its file:line and what is wrong.
func TestLiveReadsEachPrometheusQueryOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	pair := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "app_pair"}, []string{"x"})
	pair.WithLabelValues("a").Set(1)
	pair.WithLabelValues("b").Set(2)
	reg.MustRegister(pair)
	exp := promtest.Export(t, reg)
	prom := promtest.Start(t, promtest.Options{Targets: []string{exp.Addr}})
	prom.WaitSeries(t, "app_pair", 2, 30*time.Second)
	c := pgtest.Cluster(t)
	get := func(k string) string {
		switch k {
		case "THROTTLED_COORDINATION_DSN":
			return c.Primary.DSN(pgcluster.RoleAdmin)
		case "THROTTLED_PRIMARY_DSN":
			return c.Primary.DSN(pgcluster.RoleMonitor)
		}
		return promGetenv(k)
	}
	// One line lower: the coordination_dsn line below comes first.
	where := fmt.Sprintf(`prometheus signal "api_p99" (throttled.hcl:%d)`, promLine+1)
	for _, tc := range []struct {
		name, address, query string
		want                 []string
	}{
		{"one series", prom.URL, `sum(app_pair)`, nil},
		{"no series yet", prom.URL, `app_not_yet`, nil},
		{"two series", prom.URL, `app_pair`, []string{where, "2 series, want one"}},
		{"syntax error", prom.URL, `sum(app_pair`, []string{where, "Prometheus refused it", "parse error"}},
		{"unreachable", "http://" + closedAddr(t), `sum(app_pair)`, []string{where, "unreachable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("throttled.hcl", []byte(strings.Replace(promFile(tc.address, tc.query, "  target = 1.1"), "  cores = 2\n", "  cores = 2\n  coordination_dsn = env(\"THROTTLED_COORDINATION_DSN\")\n", 1)), get)
			if err != nil {
				t.Fatal(err)
			}
			err = cfg.Live(context.Background())
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "tok-6c1d9e2f7a3b5c48") {
				t.Errorf("error %q shows the bearer token", err)
			}
			if tc.name == "unreachable" && !errors.Is(err, signals.ErrUnreachable) {
				t.Errorf("error %v is not signals.ErrUnreachable", err)
			}
		})
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// The example file and docs/SIGNALS.md show the same Prometheus signal
// (a 15 s rate() window scraped every second) with the same delay: the
// scrape interval plus the window.
func TestExampleAndDocsAgreeOnDelay(t *testing.T) {
	delayOf := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		_, block, ok := strings.Cut(string(b), `prometheus_signal "api_p99" {`)
		if !ok {
			t.Fatalf("%s: no prometheus_signal \"api_p99\" block", path)
		}
		if end := regexp.MustCompile(`(?m)^#?\s*}\s*$`).FindStringIndex(block); end != nil {
			block = block[:end[0]]
		}
		m := regexp.MustCompile(`delay\s*=\s*"([^"]+)"`).FindStringSubmatch(block)
		if m == nil {
			t.Fatalf("%s: api_p99 gives no delay", path)
		}
		return m[1]
	}
	if ex, doc := delayOf("../examples/throttled.hcl"), delayOf("../docs/SIGNALS.md"); ex != doc || ex != "16s" {
		t.Fatalf("delay: example %s, docs %s; want both 16s (a 1s scrape plus the 15s window)", ex, doc)
	}
}
