package config

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/signals"
)

const gated = smallest + `
custom_signal "orders_backlog" {
  query   = "SELECT count(*) FROM orders_queue"
  unit    = "rows"
  timeout = "500ms"
  every   = "2s"
}
signal "orders_backlog" {
  target = 10000
}
signal "vacuum_running" {
  target = 0
}
job "purge_events" {
  tables  = ["events", "Archive.Events_Old"]
  signals = ["vacuum_running"]
}
job "purge_orders" {
  tables = ["app.orders"]
}
`

// Job rules and custom signals come out of the file as the controller and
// the sampler take them: the gates in JobRules (none in Rules), a custom
// signal with its file:line, each job's tables as the catalog names them.
func TestJobRulesAndCustomSignalsParse(t *testing.T) {
	c, err := Parse("throttled.hcl", []byte(gated), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Rules[signals.VacuumRunning]; ok {
		t.Errorf("vacuum_running is in the cluster rules: %v", c.Rules)
	}
	vr, ok := c.JobRules[signals.VacuumRunning]
	if !ok || vr.Target != 0 || !vr.Required {
		t.Errorf("JobRules[vacuum_running] = %+v, %v; want target 0, required", vr, ok)
	}
	ob := c.JobRules["orders_backlog"]
	if ob.Target != 10000 || ob.MaxAge != 2*2*time.Second+500*time.Millisecond {
		t.Errorf("JobRules[orders_backlog] = %+v; want target 10000, max_age two readings and a timeout (4.5s)", ob)
	}
	if len(c.Custom) != 1 || c.Custom[0].Query != "SELECT count(*) FROM orders_queue" || c.Custom[0].Every != 2*time.Second ||
		c.Custom[0].Timeout != 500*time.Millisecond || c.Custom[0].Unit != "rows" || !strings.HasPrefix(c.Custom[0].Source, "throttled.hcl:") {
		t.Errorf("Custom = %+v", c.Custom)
	}
	jobs := map[string]Job{}
	for _, j := range c.Jobs {
		jobs[j.Name] = j
	}
	if j := jobs["purge_events"]; !slices.Equal(j.Tables, []string{"public.events", "archive.events_old"}) || !slices.Equal(j.Signals, []string{"vacuum_running"}) {
		t.Errorf("purge_events = %+v", j)
	}
	if j := jobs["purge_orders"]; !slices.Equal(j.Tables, []string{"app.orders"}) || j.Signals != nil {
		t.Errorf("purge_orders = %+v; want its table and every job rule (nil)", j)
	}
	if cc := c.ControllerConfig(); len(cc.JobRules) != 2 {
		t.Errorf("ControllerConfig().JobRules = %v", cc.JobRules)
	}
}

// Every mistake in a job rule, a custom signal or a job's choice of them
// is refused at its block's line, in the file's words.
func TestJobRuleMistakesAreRefusedAtTheirLine(t *testing.T) {
	for name, tc := range map[string]struct{ extra, want string }{
		"critical on a gate":    {"signal \"vacuum_running\" {\n  target = 0\n  critical = 1\n}\n", "takes no critical level"},
		"optional gate":         {"signal \"vacuum_running\" {\n  target = 0\n  required = false\n}\n", "always fails closed"},
		"negative target":       {"signal \"vacuum_running\" {\n  target = -1\n}\n", "target must be 0 or more"},
		"cluster signal chosen": {"job \"x\" {\n  signals = [\"primary_load\"]\n}\n", "is a cluster signal"},
		"unknown job rule":      {"job \"x\" {\n  signals = [\"orders_backlog\"]\n}\n", "has no signal block with a target; none are configured"},
		"vacuum without tables": {"signal \"vacuum_running\" {\n  target = 0\n}\njob \"x\" {\n  signals = [\"vacuum_running\"]\n}\n", "tables is empty"},
		"bad table":             {"job \"x\" {\n  tables = [\"a.b.c\"]\n}\n", "is not a table name"},
		"custom name":           {"custom_signal \"Backlog\" {\n  query = \"SELECT 1\"\n}\n", "want lower case"},
		"custom built-in":       {"custom_signal \"primary_load\" {\n  query = \"SELECT 1\"\n}\n", "is a built-in signal"},
		"two statements":        {"custom_signal \"b\" {\n  query = \"SELECT 1; DROP TABLE t\"\n}\n", "more than one statement"},
		"custom stale at once":  {"custom_signal \"b\" {\n  query = \"SELECT 1\"\n  every = \"10s\"\n}\nsignal \"b\" {\n  target = 1\n  max_age = \"5s\"\n}\n", "must exceed the custom signal's every"},
		"unknown signal":        {"signal \"nope\" {\n  target = 1\n}\n", "custom_signal blocks"},
	} {
		t.Run(name, func(t *testing.T) {
			src := smallest + tc.extra
			_, err := Parse("throttled.hcl", []byte(src), getenv)
			line := strings.Count(smallest, "\n") + 1
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "throttled.hcl:") {
				t.Fatalf("Parse: %v; want an error at a line saying %q", err, tc.want)
			}
			m := regexp.MustCompile(`throttled\.hcl:(\d+)`).FindStringSubmatch(err.Error())
			if n, _ := strconv.Atoi(m[1]); n < line {
				t.Errorf("Parse: %v; want it at a line of the new blocks (from %d)", err, line)
			}
		})
	}
}

func TestWindowsParse(t *testing.T) {
	src := smallest + `
maintenance "weekly-vacuum" {
  window = "sun 02:00-04:00 Europe/Istanbul"
}
job "nightly" {
  run_windows = ["mon-fri 01:00-06:00 Europe/Istanbul", "sat,sun 00:00-24:00 Europe/Istanbul"]
  avoid       = ["weekly-vacuum"]
}
`
	c, err := Parse("throttled.hcl", []byte(src), getenv)
	if err != nil {
		t.Fatal(err)
	}
	jw := c.Windows["nightly"]
	if len(jw.Run) != 2 || jw.Run[0].String() != "mon,tue,wed,thu,fri 01:00-06:00 Europe/Istanbul" || jw.Avoid["weekly-vacuum"].String() != "sun 02:00-04:00 Europe/Istanbul" {
		t.Errorf("windows = %+v", c.Windows)
	}
	if _, ok := c.Windows["purge"]; ok {
		t.Errorf("purge has no windows, got %+v", c.Windows["purge"])
	}
	for extra, want := range map[string]string{
		"job \"x\" {\n  run_windows = [\"01:00-06:00\"]\n}\n":      "run_windows: window",
		"job \"x\" {\n  avoid = [\"nope\"]\n}\n":                   `no maintenance block "nope"`,
		"maintenance \"m\" {\n  window = \"25:00-26:00 UTC\"\n}\n": `maintenance "m"`,
	} {
		if _, err := Parse("throttled.hcl", []byte(smallest+extra), getenv); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "throttled.hcl:") {
			t.Errorf("%q: %v; want an error at a line saying %q", extra, err, want)
		}
	}
}

func TestPgBouncerBlock(t *testing.T) {
	c, err := Parse("throttled.hcl", []byte(smallest+"pgbouncer {\n  dsn = \"postgres://m@bouncer:6432/pgbouncer\"\n}\nsignal \"pgbouncer_waiting_clients_max\" {\n  target = 1\n  critical = 20\n}\n"), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.PgBouncerDSN != "postgres://m@bouncer:6432/pgbouncer" || c.Rules[signals.PgBouncerWaitingClientsMax].Target != 1 {
		t.Errorf("PgBouncerDSN %q, rules %v", c.PgBouncerDSN, c.Rules)
	}
	for extra, want := range map[string]string{
		"pgbouncer {\n}\n": "dsn (or dsn_file) is required",
		"pgbouncer {\n  dsn = \"postgres://a:b@h:x/db\"\n}\n": "pgbouncer: dsn",
	} {
		_, err := Parse("throttled.hcl", []byte(smallest+extra), getenv)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), ":b@") {
			t.Errorf("%q: %v; want %q, without the password", extra, err, want)
		}
	}
}

func TestRunbookURL(t *testing.T) {
	c, err := Parse("throttled.hcl", []byte("runbook_url = \"https://wiki.example/db/throttled\"\n"+smallest), getenv)
	if err != nil || c.Runbook != "https://wiki.example/db/throttled" {
		t.Fatalf("%+v, %v", c.Runbook, err)
	}
	for _, bad := range []string{"wiki/throttled", "https://wiki.example/x#top", "ftp://wiki.example/x"} {
		if _, err := Parse("throttled.hcl", []byte("runbook_url = \""+bad+"\"\n"+smallest), getenv); err == nil || !strings.Contains(err.Error(), "throttled.hcl:1") {
			t.Errorf("runbook_url %q: %v; want an error at line 1", bad, err)
		}
	}
}
