package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

var env = map[string]string{
	"THROTTLED_PRIMARY_DSN":    "postgres://monitor@db1/app",
	"THROTTLED_TOKEN_OPS":      "ops-secret-0123456789",
	"THROTTLED_TOKEN_VIEWER":   "viewer-secret-0123456789",
	"THROTTLED_WEBHOOK_SECRET": "hook-secret",
	"THROTTLED_GRAFANA_SECRET": "grafana-secret-0123456789",
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
	if c.Rules[signals.PrimaryLoad].Target != 0.7 || c.HoldMax.Hours() != 24 {
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
		{"thresholds", smallest + "signal \"primary_load\" {\n  target = 1.2\n  critical = 1.0\n}\n", []string{`Target 1.2 must be below Critical 1`}},
		{"unknown signal", smallest + "signal \"cpu\" {\n  target = 1\n}\n", []string{"throttled.hcl:26:", `signal "cpu": unknown`}},
		{"duration", smallest + "holds {\n  max_ttl = \"forever\"\n}\n", []string{"throttled.hcl:26:", `max_ttl = "forever"`}},
		{"syntax", smallest + "job {", []string{"throttled.hcl:26,5: Unclosed configuration block"}},
		{"return url", smallest + "grafana {\n  return_urls = [\"grafana.example.com\"]\n}\n", []string{"throttled.hcl:26:", `return_urls: "grafana.example.com": want an absolute http(s) URL`}},
		{"user header", smallest + "grafana {\n  user_header = \"X User: me\"\n}\n", []string{"throttled.hcl:26:", `user_header = "X User: me"`}},
		{"grafana url without token", smallest + "grafana {\n  url = \"https://grafana.example.com\"\n}\n", []string{"throttled.hcl:26:", "grafana: url needs service_account_token"}},
		{"grafana token without url", smallest + "grafana {\n  service_account_token = \"glsa_0123456789\"\n}\n", []string{"throttled.hcl:26:", "grafana: service_account_token needs url"}},
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
