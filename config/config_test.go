package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
)

var env = map[string]string{
	"THROTTLED_PRIMARY_DSN":      "postgres://monitor@db1/app",
	"THROTTLED_COORDINATION_DSN": "postgres://throttled@db1/app",
	"THROTTLED_TOKEN_OPS":        "ops-secret-0123456789",
	"THROTTLED_TOKEN_VIEWER":     "viewer-secret-0123456789",
	"THROTTLED_WEBHOOK_SECRET":   "hook-secret",
	"THROTTLED_GRAFANA_SECRET":   "grafana-secret-0123456789",
}

func getenv(k string) string { return env[k] }

// smallest is the configuration operators and scripts rely on.
const smallest = `primary {
  dsn   = env("THROTTLED_PRIMARY_DSN")
  cores = 2
}
replica "replica1" {
  policy = "required"
}
listen {
  address = "127.0.0.1:18087"
}
token "ops" {
  secret = env("THROTTLED_TOKEN_OPS")
  scopes = ["read", "pause", "admin"]
}
token "viewer" {
  secret = env("THROTTLED_TOKEN_VIEWER")
  scopes = ["read"]
}
job "purge" {
  weight = 1
}
notifier "webhook" {
  url    = "http://127.0.0.1:18099/hook"
  secret = env("THROTTLED_WEBHOOK_SECRET")
}
`

func TestTheSmallestConfigWorksAsWritten(t *testing.T) {
	c, err := Parse("throttled.hcl", []byte(smallest), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.PrimaryDSN != env["THROTTLED_PRIMARY_DSN"] || c.Cores != 2 || c.Replicas["replica1"] != throttle.ReplicaRequired ||
		c.Listen != "127.0.0.1:18087" || len(c.Tokens) != 2 || len(c.Jobs) != 1 || c.Jobs[0].Weight != 1 || len(c.Notifiers) != 1 {
		t.Fatalf("parsed %+v", c)
	}
	ops, ok := c.Token("ops-secret-0123456789")
	if !ok || ops.Name != "ops" || !ops.Allows(ScopeAdmin) {
		t.Fatalf("ops token: %+v %v", ops, ok)
	}
	if v, ok := c.Token("viewer-secret-0123456789"); !ok || v.Allows(ScopePause) {
		t.Fatalf("viewer token: %+v %v", v, ok)
	}
	if _, ok := c.Token("wrong"); ok {
		t.Fatal("a wrong secret matched")
	}
	if c.Rules[signals.PrimaryLoad].Target != 0.7 || c.HoldTTL.Max.Hours() != 24 {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestTheExampleIsValid(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile("../examples/throttled.hcl")
	if err != nil {
		t.Fatal(err)
	}
	// The example reads the viewer's secret from a file.
	text := strings.Replace(string(src), "/run/secrets/throttled_viewer", filepath.Join(dir, "viewer"), 1)
	if err := os.WriteFile(filepath.Join(dir, "viewer"), []byte("viewer-secret-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse("examples/throttled.hcl", []byte(text), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := c.Token("viewer-secret-from-file"); !ok || v.Name != "viewer" {
		t.Fatal("secret_file not read (or not trimmed)")
	}
	if c.Rules[signals.ReplicaLagSeconds].Target != 5 || c.MaxBudget != 50 || c.Jobs[1].Weight != 2 {
		t.Fatalf("parsed %+v", c)
	}
	// The file a newcomer copies shows a custom signal used as a job rule
	// and a maintenance window a job avoids.
	if len(c.Custom) == 0 || c.JobRules[c.Custom[0].Name].Target == 0 {
		t.Errorf("the example has no custom signal with a rule: %+v", c.Custom)
	}
	if w := c.Windows["archive"]; len(w.Avoid) == 0 {
		t.Errorf("the example's archive job avoids no maintenance window: %+v", c.Windows)
	}
}

func TestErrorsNameFileLineAndField(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"misspelled", strings.Replace(smallest, "weight = 1", "wieght = 1", 1), []string{"throttled.hcl:20,", `"wieght"`, `Did you mean "weight"?`}},
		{"unset env", strings.Replace(smallest, "THROTTLED_TOKEN_VIEWER", "THROTTLED_TOKEN_NOPE", 1), []string{"throttled.hcl:16,", "THROTTLED_TOKEN_NOPE is not set"}},
		{"cores", strings.Replace(smallest, "cores = 2", "cores = 0", 1), []string{"throttled.hcl:1:", "cores must be a positive number of CPU cores, got 0"}},
		{"policy", strings.Replace(smallest, `policy = "required"`, `policy = "sometimes"`, 1), []string{"throttled.hcl:5:", `replica "replica1": policy = "sometimes"`}},
		{"scope", strings.Replace(smallest, `scopes = ["read"]`, `scopes = ["write"]`, 1), []string{"throttled.hcl:15:", `token "viewer": scope "write"`}},
		{"short secret", smallest, nil},
		{"address", strings.Replace(smallest, "127.0.0.1:18087", "localhost", 1), []string{"throttled.hcl:8:", "want host:port"}},
		{"thresholds", smallest + "signal \"primary_load\" {\n  target = 1.2\n  critical = 1.0\n}\n", []string{"throttled.hcl:26:", `signal "primary_load": target 1.2 must be below critical 1`}},
		{"unknown signal", smallest + "signal \"cpu\" {\n  target = 1\n}\n", []string{"throttled.hcl:26:", `signal "cpu": unknown`}},
		{"duration", smallest + "holds {\n  max_ttl = \"forever\"\n}\n", []string{"throttled.hcl:26:", `max_ttl = "forever"`}},
		{"syntax", smallest + "job {", []string{"throttled.hcl:26,5: Unclosed configuration block"}},
		{"return url", smallest + "grafana {\n  return_urls = [\"grafana.example.com\"]\n}\n", []string{"throttled.hcl:26:", `return_urls: "grafana.example.com": want an absolute http(s) URL`}},
		{"user header", smallest + "grafana {\n  user_header = \"X User: me\"\n}\n", []string{"throttled.hcl:26:", `user_header = "X User: me"`}},
		{"grafana url without token", smallest + "grafana {\n  url = \"https://grafana.example.com\"\n}\n", []string{"throttled.hcl:26:", "grafana: url needs service_account_token"}},
		{"grafana token without url", smallest + "grafana {\n  service_account_token = \"glsa_0123456789\"\n}\n", []string{"throttled.hcl:26:", "grafana: service_account_token needs url"}},
		{"token name", strings.Replace(smallest, `token "viewer" {`, "token \"view\\ner\" {", 1), []string{"throttled.hcl:15:", `token "view\ner": name has a control character U+000A at byte 4`}},
		{"default ttl", smallest + "holds {\n  default_ttl = \"500ms\"\n}\n", []string{"throttled.hcl:26:", "holds: default_ttl 500ms is under the shortest hold, 1s"}},
		{"grafana url", smallest + "grafana {\n  url = \"grafana.example.com\"\n  service_account_token = \"glsa_0123456789\"\n}\n", []string{"throttled.hcl:26:", `grafana: url = "grafana.example.com": want Grafana's base URL`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.src
			e := getenv
			if tc.name == "short secret" {
				e = func(k string) string {
					if k == "THROTTLED_TOKEN_OPS" {
						return "short"
					}
					return getenv(k)
				}
				tc.want = []string{"throttled.hcl:11:", `token "ops": the secret must be at least 16 characters`}
			}
			_, err := Parse("throttled.hcl", []byte(src), e)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			for _, secret := range env {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error contains a secret: %v", err)
				}
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add(smallest)
	f.Add("primary { cores = 1 }\nsignal \"primary_load\" { target = 0.5 }")
	f.Add(`job "a" { weight = -1 }`)
	f.Add(gated)
	f.Add(smallest + "maintenance \"m\" {\n  window = \"sun 02:00-04:00 UTC\"\n}\njob \"n\" {\n  run_windows = [\"01:00-06:00 UTC\"]\n  avoid = [\"m\"]\n}\npgbouncer {\n  dsn = \"host=b dbname=pgbouncer\"\n}\n")
	f.Add(smallest + "prometheus {\n  address = \"http://127.0.0.1:9090\"\n}\nprometheus_signal \"p\" {\n  query = \"sum(rate(x[15s]))\"\n  traffic = \"y\"\n  min_traffic = 1\n}\nsignal \"p\" {\n  target = 1.1\n  baseline = \"job-free\"\n}\n")
	f.Fuzz(func(t *testing.T, src string) {
		c, err := Parse("fuzz.hcl", []byte(src), getenv)
		if err != nil {
			return
		}
		if !(c.Cores > 0) || c.PrimaryDSN == "" {
			t.Fatalf("accepted %q as %+v", src, c)
		}
		if _, err := throttle.New(c.ControllerConfig()); err != nil {
			t.Fatalf("accepted a config the controller refuses: %v", err)
		}
	})
}

func TestGrafanaConfirmPageSettings(t *testing.T) {
	c, err := Parse("throttled.hcl", []byte(smallest+"grafana {\n  user_header = \"x-webauth-user\"\n  return_urls = [\"https://grafana.example.com/d/\"]\n}\n"), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Grafana.UserHeader != "X-Webauth-User" || len(c.Grafana.ReturnURLs) != 1 || c.Grafana.ReturnURLs[0] != "https://grafana.example.com/d/" {
		t.Fatalf("grafana settings: %+v", c.Grafana)
	}
}

func TestGrafanaAnnotationSettings(t *testing.T) {
	env := func(k string) string {
		if k == "GRAFANA_SA" {
			return "glsa_secret_from_env"
		}
		return getenv(k)
	}
	c, err := Parse("throttled.hcl", []byte(smallest+"grafana {\n  url = \"https://grafana.example.com/\"\n  service_account_token = env(\"GRAFANA_SA\")\n}\n"), env)
	if err != nil {
		t.Fatal(err)
	}
	if c.Grafana.URL != "https://grafana.example.com" || c.Grafana.ServiceAccountToken != "glsa_secret_from_env" {
		t.Fatalf("grafana settings: %+v", c.Grafana)
	}
}

// Grafana signs timestamp + ":" + body when it sends its timestamp header;
// a signature over the body alone can be replayed forever, so accepting
// one is an opt-out the file must state, off by default.
func TestGrafanaUnstampedSignaturesAreOptIn(t *testing.T) {
	c, err := Parse("throttled.hcl", []byte(smallest+"grafana {\n  webhook_secret = env(\"THROTTLED_GRAFANA_SECRET\")\n}\n"), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Grafana.AllowUnstampedSignatures {
		t.Fatal("unstamped signatures are allowed by default")
	}
	c, err = Parse("throttled.hcl", []byte(smallest+"grafana {\n  webhook_secret = env(\"THROTTLED_GRAFANA_SECRET\")\n  allow_unstamped_signatures = true\n}\n"), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Grafana.AllowUnstampedSignatures {
		t.Fatal("allow_unstamped_signatures = true not read")
	}
}

// Duplicate blocks of every kind are refused, naming both places. A second
// signal block (and a second notifier of a kind) used to be accepted, the
// last one silently winning; duplicate replicas, jobs and tokens were
// refused naming only the second place. The singleton blocks are refused
// by HCL itself, which names both places too; they are here so that stays
// true.
func TestDuplicateBlocksAreRefusedNamingBothPlaces(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		want        []string
	}{
		{"signal", "signal \"primary_load\" {\n  target = 0.5\n}\nsignal \"primary_load\" {\n  target = 0.6\n}\n",
			[]string{"throttled.hcl:29:", `signal "primary_load" is configured twice`, "throttled.hcl:26"}},
		{"notifier", "notifier \"webhook\" {\n  url = \"http://127.0.0.1:18099/hook\"\n}\n",
			[]string{"throttled.hcl:26:", `notifier "webhook to http://127.0.0.1:18099/hook" is configured twice`, "throttled.hcl:22"}},
		{"replica", "replica \"replica1\" {\n}\n", []string{"throttled.hcl:26:", `replica "replica1" is configured twice`, "throttled.hcl:5"}},
		{"job", "job \"purge\" {\n}\n", []string{"throttled.hcl:26:", `job "purge" is configured twice`, "throttled.hcl:19"}},
		{"token", "token \"ops\" {\n  secret = \"another-secret-0123456789\"\n  scopes = [\"read\"]\n}\n",
			[]string{"throttled.hcl:26:", `token "ops" is configured twice`, "throttled.hcl:11"}},
		{"primary", "primary {\n  dsn = \"postgres://b/app\"\n  cores = 4\n}\n", []string{"throttled.hcl:26,", "Duplicate primary block", "throttled.hcl:1,"}},
		{"listen", "listen {\n  address = \"127.0.0.1:18088\"\n}\n", []string{"throttled.hcl:26,", "Duplicate listen block", "throttled.hcl:8,"}},
		{"holds", "holds {\n}\nholds {\n}\n", []string{"throttled.hcl:28,", "Duplicate holds block", "throttled.hcl:26,"}},
		{"controller", "controller {\n}\ncontroller {\n}\n", []string{"throttled.hcl:28,", "Duplicate controller block", "throttled.hcl:26,"}},
		{"grafana", "grafana {\n}\ngrafana {\n}\n", []string{"throttled.hcl:28,", "Duplicate grafana block", "throttled.hcl:26,"}},
		{"attribute", "cluster = \"a\"\ncluster = \"b\"\n", []string{"throttled.hcl:27,", `"cluster" was already set at throttled.hcl:26,`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("throttled.hcl", []byte(smallest+tc.extra), getenv)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// Two notifiers of one kind page two places; that stays allowed.
func TestTwoNotifiersOfOneKind(t *testing.T) {
	c, err := Parse("throttled.hcl", []byte(smallest+"notifier \"webhook\" {\n  url = \"http://127.0.0.1:18100/hook\"\n}\n"), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Notifiers) != 2 {
		t.Fatalf("notifiers: %+v", c.Notifiers)
	}
}

// A signal block that sets only a target keeps the signal's default
// critical level: it once dropped it, so moving primary_load's target
// turned its auto-pause off. critical = 0 turns it off in so many words.
func TestSignalBlockWithoutCriticalKeepsTheDefault(t *testing.T) {
	def := throttle.DefaultRules()[signals.PrimaryLoad].Critical
	if def == 0 {
		t.Fatal("primary_load has no default critical level")
	}
	c, err := Parse("throttled.hcl", []byte(smallest+"signal \"primary_load\" {\n  target = 0.6\n}\n"), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Rules[signals.PrimaryLoad]; r.Target != 0.6 || r.Critical != def {
		t.Fatalf("primary_load rule %+v; want target 0.6 and the default critical %v", r, def)
	}
	c, err = Parse("throttled.hcl", []byte(smallest+"signal \"primary_load\" {\n  target = 0.6\n  critical = 0\n}\n"), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Rules[signals.PrimaryLoad]; r.Critical != 0 {
		t.Fatalf("critical = 0 read as %v", r.Critical)
	}
}

// The controller's own checks on the assembled rules used to be reported
// against the file with no line, in Go's names ("throttled.hcl: throttle:
// EmergencyPressure 1.3 must be below Rules["primary_load"]'s critical
// pressure 1.25"). Each now names the signal block that set the value, in
// the file's words.
func TestControllerErrorsNameTheBlockInTheFilesWords(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		want        string
	}{
		{"critical within the emergency cut", "signal \"primary_load\" {\n  target = 0.8\n  critical = 1.0\n}\n",
			`signal "primary_load": critical 1 is too close to target 0.8: every job is cut at once at 1.3 × target (1.04)`},
		{"headroom critical within the emergency cut", "signal \"connection_headroom\" {\n  target = 0.1\n  critical = 0.09\n}\n",
			`signal "connection_headroom": critical 0.09 is too close to target 0.1`},
		{"headroom target", "signal \"connection_headroom\" {\n  target = 1.5\n}\n",
			`signal "connection_headroom": target 1.5: connection_headroom is the free fraction of client slots; want a target under 1`},
		{"headroom critical over target", "signal \"connection_headroom\" {\n  target = 0.1\n  critical = 0.2\n}\n",
			`signal "connection_headroom": critical 0.2 must be below target 0.1`},
		{"headroom resume", "signal \"connection_headroom\" {\n  target = 0.9\n  critical = 0.6\n}\n",
			`signal "connection_headroom": critical 0.6: after a critical pause work resumes only with critical / 0.5 = 1.2 of client slots free`},
		{"target", "signal \"replica_lag_seconds\" {\n  target = 0\n}\n", `signal "replica_lag_seconds": target must be a positive number, got 0`},
		{"critical", "signal \"replica_lag_seconds\" {\n  target = 2\n  critical = -1\n}\n", `signal "replica_lag_seconds": critical must not be negative, got -1`},
		{"informs only", "signal \"primary_job_sessions\" {\n  target = 4\n}\n",
			`signal "primary_job_sessions": takes no rule, it only informs; rules may name primary_load, primary_io_wait`},
		{"latency target", "signal \"foreground_latency\" {\n  target = 0.9\n}\n",
			`signal "foreground_latency": target 0.9: foreground_latency is a multiple of the canary's latency without jobs; want a target above 1, such as 1.3`},
		{"latency critical within the emergency cut", "signal \"foreground_latency\" {\n  target = 1.5\n  critical = 1.6\n}\n",
			`signal "foreground_latency": critical 1.6 is too close to target 1.5: every job is cut at once at 1.3 times the excess the target allows (1.65)`},
		{"latency off and on", "signal \"foreground_latency\" {\n  target = 1.5\n}\ncontroller {\n  foreground_latency = false\n}\n",
			`signal "foreground_latency": a rule on it, and the controller block's foreground_latency = false: one or the other`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("throttled.hcl", []byte(smallest+tc.extra), getenv)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "config: throttled.hcl:26: "+tc.want) {
				t.Errorf("error %q lacks %q at throttled.hcl:26", err, tc.want)
			}
			for _, goName := range []string{"throttle:", "Rules[", "EmergencyPressure", "ResumeLevel", "Target", "Critical"} {
				if strings.Contains(err.Error(), goName) {
					t.Errorf("error %q speaks of %s", err, goName)
				}
			}
		})
	}
}

// Every offline error names a line, including the top-level cluster
// attribute (it used to name the file alone).
func TestEmptyClusterNamesItsLine(t *testing.T) {
	_, err := Parse("throttled.hcl", []byte(smallest+"cluster = \"\"\n"), getenv)
	if err == nil || !strings.Contains(err.Error(), "config: throttled.hcl:26: cluster must not be empty") {
		t.Fatalf("empty cluster: %v", err)
	}
}

// A listen address is checked whole at load, port included: 99999 used to
// pass, and run then failed at listen with an error that named no file or
// line.
func TestListenAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:99999":     `port "99999" is not a number from 1 to 65535`,
		"127.0.0.1:0":         `port "0" is not a number from 1 to 65535`,
		"127.0.0.1:http":      `port "http" is not a number from 1 to 65535`,
		"localhost":           "missing port in address",
		"bad_host!:8080":      `host "bad_host!" is neither an IP address nor a DNS name`,
		"127.0.0.256:8080":    `host "127.0.0.256" is neither an IP address nor a DNS name`,
		"-throttled:8080":     `host "-throttled" is neither an IP address nor a DNS name`,
		":18087":              "",
		"[::1]:18087":         "",
		"0.0.0.0:65535":       "",
		"throttled.local:443": "",
	} {
		t.Run(addr, func(t *testing.T) {
			c, err := Parse("throttled.hcl", []byte(strings.Replace(smallest, "127.0.0.1:18087", addr, 1)), getenv)
			if want == "" {
				if err != nil || c.Listen != addr {
					t.Fatalf("refused a good address: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "config: throttled.hcl:8: listen: address = ") || !strings.Contains(err.Error(), want) {
				t.Fatalf("address %q: %v; want %q at throttled.hcl:8", addr, err, want)
			}
		})
	}
}

// docs/SIGNALS.md's examples of rules on the horizon, slot and wraparound
// signals are valid as written and reach the controller's rules.
func TestRulesOnHorizonSlotsAndWraparound(t *testing.T) {
	src := smallest + `
signal "xmin_horizon_age_seconds" { target = 1800 }
signal "slot_retained_bytes_max" {
  target   = 10e9
  critical = 50e9
}
signal "wraparound_fraction" {
  target   = 0.7
  critical = 1
}
`
	c, err := Parse("throttled.hcl", []byte(src), getenv)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[signals.Name]throttle.Rule{
		signals.XminHorizonAgeSeconds: {Target: 1800},
		signals.SlotRetainedBytesMax:  {Target: 10e9, Critical: 50e9},
		signals.WraparoundFraction:    {Target: 0.7, Critical: 1},
	} {
		if got := c.Rules[name]; got.Target != want.Target || got.Critical != want.Critical {
			t.Errorf("rule %s = %+v; want target %v critical %v", name, got, want.Target, want.Critical)
		}
	}
}

// The foreground-latency canary runs by default where it can; the
// controller block turns it off.
func TestControllerTurnsForegroundLatencyOff(t *testing.T) {
	for _, tc := range []struct {
		extra string
		off   bool
	}{
		{"", false},
		{"controller {\n  foreground_latency = true\n}\n", false},
		{"controller {\n  foreground_latency = false\n}\n", true},
	} {
		cfg, err := Parse("throttled.hcl", []byte(smallest+tc.extra), getenv)
		if err != nil {
			t.Fatalf("%q: %v", tc.extra, err)
		}
		if cfg.NoForegroundLatency != tc.off {
			t.Errorf("%q: NoForegroundLatency %v; want %v", tc.extra, cfg.NoForegroundLatency, tc.off)
		}
	}
}

// The holds block follows the one rule for a hold's life
// (hold.TTLPolicy), as hold.Local and the store do: a max_ttl under
// a 1h default that was never written fills the default under it, while
// a written default_ttl over max_ttl is refused with its line.
func TestHoldsTTLFollowTheOnePolicy(t *testing.T) {
	c, err := Parse("throttled.hcl", []byte(smallest+"holds {\n  max_ttl = \"30m\"\n}\n"), getenv)
	if err != nil {
		t.Fatalf("max_ttl 30m alone: %v", err)
	}
	if c.HoldTTL != (hold.TTLPolicy{Default: 30 * time.Minute, Max: 30 * time.Minute}) {
		t.Errorf("max_ttl 30m alone: %+v; want the default filled under it", c.HoldTTL)
	}
	c, err = Parse("throttled.hcl", []byte(smallest+"holds {\n  default_ttl = \"15m\"\n}\n"), getenv)
	if err != nil || c.HoldTTL != (hold.TTLPolicy{Default: 15 * time.Minute, Max: 24 * time.Hour}) {
		t.Errorf("default_ttl 15m alone: %+v, %v", c.HoldTTL, err)
	}
	_, err = Parse("throttled.hcl", []byte(smallest+"holds {\n  default_ttl = \"2h\"\n  max_ttl = \"1h\"\n}\n"), getenv)
	if err == nil || !strings.Contains(err.Error(), "throttled.hcl:26:") || !strings.Contains(err.Error(), "holds: default_ttl 2h0m0s exceeds max_ttl 1h0m0s") {
		t.Errorf("default_ttl over max_ttl: %v", err)
	}
}
