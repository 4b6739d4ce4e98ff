package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/signals"
)

// TestMain runs the tests, or, with THROTTLED_TEST_RUN_MAIN=1, runs this
// binary as the throttled command itself, so tests can start it as a
// separate process (and kill it).
func TestMain(m *testing.M) {
	if os.Getenv("THROTTLED_TEST_RUN_MAIN") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	pgtest.Main(m)
}

func noEnv(string) string { return "" }

func TestParseSignalsFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want string // error substring; "" for success
	}{
		{[]string{"--primary-dsn", "postgres://h/db", "--cores", "2"}, "", ""},
		{[]string{"--cores", "2"}, "postgres://h/db", ""},
		{[]string{"--cores", "2"}, "", "--primary-dsn (or THROTTLED_PRIMARY_DSN, or --config) is required"},
		{[]string{"--primary-dsn", "postgres://h/db"}, "", "--cores must be a positive number of CPU cores, got 0"},
		{[]string{"--primary-dsn", "postgres://h/db", "--cores", "-1"}, "", "got -1"},
		{[]string{"--primary-dsn", "postgres://h/db", "--cores", "NaN"}, "", "got NaN"},
		{[]string{"--primary-dsn", "postgres://h/db", "--cores", "+Inf"}, "", "got +Inf"},
		{[]string{"--primary-dsn", "postgres://h/db", "--cores", "two"}, "", `--cores "two": want a number`},
		{[]string{"--primary-dsn", "postgres://h/db", "--cores", "2", "--interval", "0s"}, "", "--interval must be positive"},
		{[]string{"--primary-dsn", "postgres://h/db", "--cores", "2", "--timeout", "-1s"}, "", "--timeout must be positive"},
		{[]string{"--primary-dsn", "postgres://h/db", "--cores", "2", "--max-age", "100ms"}, "", "the sampling interval 250ms must be shorter than --max-age 100ms"},
		{[]string{"--primary-dsn", "postgres://h/db", "--cores", "2", "extra"}, "", `unknown command "extra" for "throttled signals"`},
		{[]string{"--nope"}, "", "unknown flag --nope"},
	} {
		getenv := func(k string) string {
			if k == "THROTTLED_PRIMARY_DSN" {
				return tc.env
			}
			return ""
		}
		o, err := parseSignalsFlags(tc.args, getenv, io.Discard)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v; want %q", tc.args, err, tc.want)
		case tc.want == "" && o.cfg.PrimaryDSN != "postgres://h/db":
			t.Errorf("%v: primary DSN %q", tc.args, o.cfg.PrimaryDSN)
		}
	}
	o, err := parseSignalsFlags([]string{"--primary-dsn", "p", "--cores", "4", "--replica-dsn", "a", "--replica-dsn", "b",
		"--replica", "r1", "--interval", "100ms", "--watch", "--json"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.cfg.ReplicaDSNs) != 2 || o.cfg.ReplicaDSNs[1] != "b" || o.cfg.Replicas[0] != "r1" || !o.watch || !o.json ||
		o.cfg.Cores != 4 || o.cfg.Interval != 100*time.Millisecond {
		t.Fatalf("parsed %+v", o)
	}
}

func TestHelpNeverPrintsTheEnvironmentDSN(t *testing.T) {
	t.Setenv("THROTTLED_PRIMARY_DSN", "postgres://u:hunter2@h/db")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"signals", "-h"}, &out, &errOut); code != exitOK {
		t.Fatalf("signals -h: exit %d: %s", code, errOut.String())
	}
	if all := out.String() + errOut.String(); strings.Contains(all, "hunter2") || !strings.Contains(all, "--primary-dsn") {
		t.Fatalf("help output:\n%s", all)
	}
}

func FuzzParseSignalsFlags(f *testing.F) {
	f.Add("--primary-dsn postgres://h/db --cores 2 --interval 1s")
	f.Add("--cores 1e309 --max-age 1ns --timeout 1h")
	f.Add("--replica-dsn= --replica --watch=false")
	f.Add("--primary-dsn x --cores NaN")
	f.Fuzz(func(t *testing.T, line string) {
		o, err := parseSignalsFlags(strings.Fields(line), noEnv, io.Discard)
		if err != nil {
			return
		}
		// What parses is a config the poller accepts.
		if _, err := signals.New(o.cfg); err != nil && !strings.Contains(err.Error(), "DSN") && !strings.Contains(err.Error(), "Replicas[") {
			t.Fatalf("flags %q parsed to a config New refuses: %v", line, err)
		}
	})
}

func TestRunUnknownCommandAndHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"frobnicate"}, &out, &errOut); code != exitUsage ||
		!strings.Contains(errOut.String(), `unknown command "frobnicate"`) {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	if code := run(context.Background(), []string{"help"}, &out, &errOut); code != exitOK || !strings.Contains(out.String(), "signals") {
		t.Fatalf("help: exit %d, %q", code, out.String())
	}
}

func TestSignalsOnceJSON(t *testing.T) {
	c := pgtest.Cluster(t)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"signals", "--primary-dsn", c.Primary.DSN(pgcluster.RoleMonitor),
		"--replica-dsn", c.Replica.DSN(pgcluster.RoleMonitor), "--cores", "2", "--json", "--log-json", "--log-level", "debug"}, &out, &errOut)
	if code != exitOK {
		t.Fatalf("exit %d: %s%s", code, out.String(), errOut.String())
	}
	var snap struct {
		At      time.Time `json:"at"`
		Signals []struct {
			Name       string            `json:"name"`
			Labels     map[string]string `json:"labels"`
			Value      *float64          `json:"value"`
			Unit       string            `json:"unit"`
			At         time.Time         `json:"at"`
			AgeSeconds *float64          `json:"age_seconds"`
			Stale      *bool             `json:"stale"`
			Error      *string           `json:"error"`
		} `json:"signals"`
	}
	if err := json.Unmarshal(out.Bytes(), &snap); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	seen := map[string]bool{}
	for _, s := range snap.Signals {
		seen[s.Name] = true
		if s.Value == nil || s.Error != nil || s.AgeSeconds == nil || s.Stale == nil || *s.Stale || s.Unit == "" || s.At.IsZero() {
			t.Errorf("signal %+v", s)
		}
		if strings.HasPrefix(s.Name, "replica_") && s.Labels["replica"] != pgcluster.ReplicaName {
			t.Errorf("%s labels %v; want replica=%s", s.Name, s.Labels, pgcluster.ReplicaName)
		}
	}
	for _, n := range signals.Names {
		if !seen[string(n)] && !signals.OptIn(n) && !signals.Conditional(n) {
			t.Errorf("signal %s missing from output", n)
		}
	}
	// --log-json: every log line is a JSON object from a named part.
	sc := bufio.NewScanner(&errOut)
	lines := 0
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		if line["@module"] != "throttled.signals" {
			t.Errorf("log line from %v", line["@module"])
		}
		lines++
	}
	if lines == 0 {
		t.Fatal("no debug log lines")
	}
	if strings.Contains(errOut.String(), c.Password(pgcluster.RoleMonitor)) {
		t.Fatal("log contains the password")
	}
}

func TestSignalsOnceExitsUnsafeForAMissingReplica(t *testing.T) {
	c := pgtest.Cluster(t)
	if err := c.StopReplica(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.StartReplica(context.Background()) })
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"signals", "--primary-dsn", c.Primary.DSN(pgcluster.RoleMonitor), "--cores", "2"}, &out, &errOut)
	if code != exitUnsafe {
		t.Fatalf("exit %d; want %d\n%s%s", code, exitUnsafe, out.String(), errOut.String())
	}
	for _, want := range []string{"SIGNAL", "primary_load", `error: signals: replica "replica1" is missing`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestSignalsFailsClearlyWithoutPgMonitor(t *testing.T) {
	c := pgtest.Cluster(t)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"signals", "--primary-dsn", c.Primary.DSN(pgcluster.RolePlain), "--cores", "2"}, &out, &errOut)
	if code != exitError || !strings.Contains(errOut.String(), "missing grant pg_read_all_stats") {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
}

// lineWriter hands each written line to a channel.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		w.lines <- line
	}
}

func TestSignalsWatchPrintsUntilInterrupted(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	out := &lineWriter{lines: make(chan string, 100)}
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"signals", "--primary-dsn", c.Primary.DSN(pgcluster.RoleMonitor), "--cores", "2",
			"--watch", "--json", "--interval", "200ms"}, out, io.Discard)
	}()
	var prev time.Time
	for i := range 3 {
		select {
		case line := <-out.lines:
			var snap struct {
				At time.Time `json:"at"`
			}
			if err := json.Unmarshal([]byte(line), &snap); err != nil {
				t.Fatalf("line %d: %v: %q", i, err, line)
			}
			if !snap.At.After(prev) {
				t.Fatalf("snapshot %d at %v, not after %v", i, snap.At, prev)
			}
			prev = snap.At
		case <-time.After(10 * time.Second):
			t.Fatal("no snapshot within 10s")
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d after interrupt", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("--watch did not stop on interrupt")
	}
}

func TestSignalsTakesCustomSignals(t *testing.T) {
	base := []string{"--primary-dsn", "postgres://m@db/app", "--cores", "2"}
	o, err := parseSignalsFlags(append(base, "--custom", "queue_depth=SELECT count(*) FROM q"), func(string) string { return "" }, io.Discard)
	if err != nil || len(o.cfg.Custom) != 1 || o.cfg.Custom[0].Name != "queue_depth" || o.cfg.Custom[0].Query != "SELECT count(*) FROM q" {
		t.Fatalf("parse: %+v, %v", o.cfg.Custom, err)
	}
	for _, bad := range []string{"no-equals", "Bad=SELECT 1", "x=SELECT 1; SELECT 2", "primary_load=SELECT 1"} {
		if _, err := parseSignalsFlags(append(base, "--custom", bad), func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "--custom") {
			t.Errorf("--custom %q: %v; want a usage error naming --custom", bad, err)
		}
	}
}

// Given a configuration file, `throttled signals` reads its custom
// signals too, each beside the built-ins, and says where each was defined
// and its rule's target; the table and the JSON alike. It once listed the
// built-ins alone. A custom signal reading NaN fails the start, naming it
// and its file:line.
func TestSignalsListsTheConfigsCustomSignals(t *testing.T) {
	c := pgtest.Cluster(t)
	t.Setenv("CFG_TEST_MONITOR_DSN", c.Primary.DSN(pgcluster.RoleMonitor))
	head := "primary {\n  dsn   = env(\"CFG_TEST_MONITOR_DSN\")\n  cores = 2\n}\nlisten {\n  address = \"127.0.0.1:18087\"\n}\njob \"purge\" {}\n"
	src := head + `custom_signal "queue_depth" {
  query = "SELECT 7"
  unit  = "rows"
}
signal "queue_depth" {
  target = 10
}
custom_signal "informs" {
  query = "SELECT 2.5"
}
`
	path := filepath.Join(t.TempDir(), "throttled.hcl")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	queueAt := fmt.Sprintf("%s:%d", path, strings.Count(head, "\n")+1)
	informsAt := fmt.Sprintf("%s:%d", path, strings.Count(head, "\n")+8)

	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"signals", "--config", path}, &out, &errOut); code != exitOK {
		t.Fatalf("signals --config: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			rows[f[0]+"/"+strconv.Itoa(len(rows))] = f
		}
	}
	for _, want := range [][]string{
		{"queue_depth", "-", "7", "7", "rows"},
		{"informs", "-", "2.500", "2.500"},
		{"queue_depth", queueAt, "10"},
		{"informs", informsAt, "-"},
	} {
		found := false
		for _, f := range rows {
			found = found || (len(f) >= len(want) && slices.Equal(f[:len(want)], want))
		}
		if !found {
			t.Errorf("the table lacks a row starting %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	if code := run(context.Background(), []string{"signals", "--config", path, "--json"}, &out, &errOut); code != exitOK {
		t.Fatalf("signals --config --json: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	var snap struct {
		Signals []struct {
			Name   string   `json:"name"`
			Value  *float64 `json:"value"`
			Source string   `json:"source"`
			Target *float64 `json:"target"`
		} `json:"signals"`
	}
	if err := json.Unmarshal(out.Bytes(), &snap); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := map[string]string{}
	for _, s := range snap.Signals {
		if s.Value != nil {
			got[s.Name] = fmt.Sprintf("%v %s", *s.Value, s.Source)
		}
		if s.Target != nil {
			got[s.Name] += fmt.Sprintf(" target %v", *s.Target)
		}
	}
	for name, want := range map[string]string{"queue_depth": "7 " + queueAt + " target 10", "informs": "2.5 " + informsAt, "primary_load": ""} {
		if g, ok := got[name]; !ok || (want != "" && g != want) {
			t.Errorf("--json: %s = %q; want %q", name, g, want)
		}
	}

	nan := filepath.Join(t.TempDir(), "nan.hcl")
	if err := os.WriteFile(nan, []byte(head+"custom_signal \"nanval\" {\n  query = \"SELECT 'NaN'::float8\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	code := run(context.Background(), []string{"signals", "--config", nan}, &out, &errOut)
	if want := fmt.Sprintf(`custom signal "nanval" (%s:%d): `, nan, strings.Count(head, "\n")+1); code != exitError ||
		!strings.Contains(errOut.String(), want) || !strings.Contains(errOut.String(), "read NaN; a custom signal must return a finite number") {
		t.Fatalf("signals --config with a NaN custom signal: exit %d; want %d naming %q and NaN\n%s%s", code, exitError, want, out.String(), errOut.String())
	}
}
