package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// fileBlockKinds are the kinds of block a configuration file may hold:
// the hcl "…,block" tags of config/hcl.go's file struct, read from its
// source (the type is the config package's own), so a new kind of block
// is here the moment it is.
func fileBlockKinds(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "..", "config", "hcl.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "file" {
			return true
		}
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			if field.Tag == nil {
				continue
			}
			tag, err := strconv.Unquote(field.Tag.Value)
			if err != nil {
				t.Fatal(err)
			}
			if name, kind, _ := strings.Cut(reflect.StructTag(tag).Get("hcl"), ","); kind == "block" {
				kinds = append(kinds, name)
			}
		}
		return false
	})
	if len(kinds) < 10 {
		t.Fatalf("found %d block kinds in config/hcl.go's file struct (%v): has it moved?", len(kinds), kinds)
	}
	return kinds
}

// Every command that takes --config says what it does with every kind
// of block: honoured, refused (naming the command that honours it), or
// not applicable (saying why). A kind added to config/hcl.go fails this
// until each command has said, and a command never ignores one silently.
func TestConfigBlockUsesComplete(t *testing.T) {
	kinds := fileBlockKinds(t)
	for _, kind := range kinds {
		for _, cmd := range configCommands {
			u, ok := blockUses[kind][cmd]
			switch {
			case !ok:
				t.Errorf("%s: no treatment of a %s block: say whether it honours, refuses, or has nothing to do with it (blockUses)", cmd, kind)
			case u.why == "":
				t.Errorf("%s: a %s block: the treatment says no why", cmd, kind)
			case u.use == refused && blockUses[kind][u.why].use != honoured:
				t.Errorf("%s: a %s block is refused for %q, which is no command that honours it", cmd, kind, u.why)
			case u.use != honoured && u.use != refused && u.use != notApplicable:
				t.Errorf("%s: a %s block: treatment %d is none of honoured, refused, not applicable", cmd, kind, u.use)
			}
		}
		// A block that paces or protects a job is honoured by every
		// command that runs one.
		if blockUses[kind]["run"].use != honoured {
			t.Errorf("run does not honour a %s block: the sidecar takes every block of its file", kind)
		}
	}
	for _, kind := range slices.Sorted(maps.Keys(blockUses)) {
		if !slices.Contains(kinds, kind) {
			t.Errorf("blockUses declares a %s block, which config/hcl.go does not have", kind)
		}
		for cmd := range blockUses[kind] {
			if !slices.Contains(configCommands, cmd) {
				t.Errorf("blockUses declares a %s block's treatment by %q, which is no command that takes --config", kind, cmd)
			}
		}
	}
}

// blockProbe is a file holding one kind of block, and what exec and
// signals must make of it when they honour it.
type blockProbe struct {
	// hcl is added to probePrimary: the block, and what it needs to be
	// valid.
	hcl     string
	exec    func(t *testing.T, opts throttled.Options, job jobs.Config)
	signals func(t *testing.T, o signalsOptions)
}

// probePrimary is every probe file's primary block.
const probePrimary = `primary {
  dsn              = "postgres://monitor@db1:5432/app"
  coordination_dsn = "postgres://admin@db1:5432/app"
  cores            = 3
}
`

// probeJob is the job exec runs in the probes.
const probeJob = "probe"

// blockProbes has one probe per kind of block a file may hold.
var blockProbes = map[string]blockProbe{
	"primary": {
		exec: func(t *testing.T, opts throttled.Options, _ jobs.Config) {
			if opts.PrimaryDSN != "postgres://monitor@db1:5432/app" || opts.Cores != 3 || opts.CoordinationDSN != "postgres://admin@db1:5432/app" {
				t.Errorf("primary %q, cores %v, coordination %q", opts.PrimaryDSN, opts.Cores, opts.CoordinationDSN)
			}
		},
		signals: func(t *testing.T, o signalsOptions) {
			if o.cfg.PrimaryDSN != "postgres://monitor@db1:5432/app" || o.cfg.Cores != 3 {
				t.Errorf("primary %q, cores %v", o.cfg.PrimaryDSN, o.cfg.Cores)
			}
		},
	},
	"replica": {
		hcl: `replica "r1" {
  policy = "required"
  dsn    = "postgres://monitor@db2:5432/app"
}
replica "r2" {
  policy = "ignored"
}
`,
		exec: func(t *testing.T, opts throttled.Options, _ jobs.Config) {
			want := map[string]throttle.ReplicaPolicy{"r1": throttle.ReplicaRequired, "r2": throttle.ReplicaIgnored}
			if !maps.Equal(opts.Controller.Replicas, want) || !slices.Equal(opts.ReplicaDSNs, []string{"postgres://monitor@db2:5432/app"}) ||
				!slices.Equal(opts.Signals.Replicas, []string{"r1"}) {
				t.Errorf("policies %v, replica DSNs %v, sampled %v", opts.Controller.Replicas, opts.ReplicaDSNs, opts.Signals.Replicas)
			}
		},
		signals: func(t *testing.T, o signalsOptions) {
			if !slices.Equal(o.cfg.Replicas, []string{"r1"}) || !slices.Equal(o.cfg.ReplicaDSNs, []string{"postgres://monitor@db2:5432/app"}) {
				t.Errorf("replicas %v, DSNs %v", o.cfg.Replicas, o.cfg.ReplicaDSNs)
			}
		},
	},
	"signal": {
		hcl: `signal "primary_load" {
  target = 0.5
}
custom_signal "queue_depth" {
  query = "SELECT 1"
}
signal "queue_depth" {
  target = 5
}
`,
		exec: func(t *testing.T, opts throttled.Options, _ jobs.Config) {
			if r := opts.Controller.Rules[signals.PrimaryLoad]; r.Target != 0.5 {
				t.Errorf("primary_load's rule %+v, want target 0.5", r)
			}
			if r, ok := opts.Controller.JobRules["queue_depth"]; !ok || r.Target != 5 {
				t.Errorf("queue_depth's job rule %+v (%v), want target 5", r, ok)
			}
		},
		signals: func(t *testing.T, o signalsOptions) {
			if c := o.customs["queue_depth"]; c.target == nil || *c.target != 5 {
				t.Errorf("queue_depth shown with %+v, want target 5", c)
			}
		},
	},
	"custom_signal": {
		hcl: `custom_signal "queue_depth" {
  query = "SELECT 1"
}
`,
		exec: func(t *testing.T, opts throttled.Options, _ jobs.Config) {
			if len(opts.Signals.Custom) != 1 || opts.Signals.Custom[0].Name != "queue_depth" {
				t.Errorf("custom signals %+v", opts.Signals.Custom)
			}
		},
		signals: func(t *testing.T, o signalsOptions) {
			if len(o.cfg.Custom) != 1 || o.cfg.Custom[0].Name != "queue_depth" {
				t.Errorf("custom signals %+v", o.cfg.Custom)
			}
		},
	},
	"maintenance": {
		hcl: `maintenance "always" {
  window = "00:00-24:00 UTC"
}
job "probe" {
  avoid = ["always"]
}
`,
		exec: func(t *testing.T, opts throttled.Options, _ jobs.Config) {
			if opts.Controller.Holds == nil {
				t.Fatal("no holds from the file's windows")
			}
			hs := opts.Controller.Holds.Applying(time.Now(), probeJob)
			if len(hs) != 1 || hs[0].ID != "maintenance:always" {
				t.Errorf("holds on the job %+v, want maintenance:always", hs)
			}
		},
	},
	"pgbouncer": {
		hcl: `pgbouncer {
  dsn = "postgres://monitor@pgb:6432/pgbouncer"
}
`,
		exec: func(t *testing.T, opts throttled.Options, _ jobs.Config) {
			if opts.Signals.PgBouncerDSN != "postgres://monitor@pgb:6432/pgbouncer" {
				t.Errorf("PgBouncer %q", opts.Signals.PgBouncerDSN)
			}
		},
		signals: func(t *testing.T, o signalsOptions) {
			if o.cfg.PgBouncerDSN != "postgres://monitor@pgb:6432/pgbouncer" {
				t.Errorf("PgBouncer %q", o.cfg.PgBouncerDSN)
			}
		},
	},
	"prometheus": {
		hcl: probeProm,
		exec: func(t *testing.T, opts throttled.Options, _ jobs.Config) {
			if p := opts.Signals.Prometheus; p.Address != "http://127.0.0.1:9090" || p.BasicUser != "throttled" || p.BasicPassword != "a-password" {
				t.Errorf("Prometheus at %q as %q", p.Address, p.BasicUser)
			}
		},
		signals: func(t *testing.T, o signalsOptions) {
			if p := o.cfg.Prometheus; p.Address != "http://127.0.0.1:9090" || p.BasicUser != "throttled" || p.BasicPassword != "a-password" {
				t.Errorf("Prometheus at %q as %q", p.Address, p.BasicUser)
			}
		},
	},
	"prometheus_signal": {
		hcl: probeProm,
		exec: func(t *testing.T, opts throttled.Options, _ jobs.Config) {
			ps := opts.Signals.Prometheus.Signals
			if len(ps) != 1 || ps[0].Name != "api_p99" || ps[0].Optional || !slices.Contains(opts.Controller.External, "api_p99") {
				t.Errorf("Prometheus signals %+v, external %v: want api_p99, required", ps, opts.Controller.External)
			}
			if r := opts.Controller.Rules["api_p99"]; r.Target != 1.5 || !r.Required || !r.Ratio {
				t.Errorf("api_p99's rule %+v", r)
			}
		},
		signals: func(t *testing.T, o signalsOptions) {
			if ps := o.cfg.Prometheus.Signals; len(ps) != 1 || ps[0].Name != "api_p99" {
				t.Errorf("Prometheus signals %+v", ps)
			}
			if c := o.customs["api_p99"]; c.target == nil || *c.target != 1.5 {
				t.Errorf("api_p99 shown with %+v, want target 1.5", c)
			}
		},
	},
	"job": {
		hcl: `signal "vacuum_running" {
  target = 0
}
job "probe" {
  max_rate              = 3
  min_rate              = 1
  weight                = 2
  tables                = ["public.t"]
  signals               = ["vacuum_running"]
  min_batch_size        = 200
  max_batch_size        = 500
  target_batch_duration = "2s"
  run_windows           = ["mon 00:00-00:01 UTC"]
}
job "other" {
  max_rate = 9
}
`,
		exec: func(t *testing.T, opts throttled.Options, job jobs.Config) {
			if job.MaxRate != 3 || job.MinRate != 1 || job.Weight != 2 || !slices.Equal(job.Tables, []string{"public.t"}) ||
				!slices.Equal(job.Signals, []string{"vacuum_running"}) || job.MinBatchSize != 200 || job.MaxBatchSize != 500 ||
				job.InitialBatchSize != 200 || job.TargetBatchDuration != 2*time.Second {
				t.Errorf("job %+v", job)
			}
			// The run window: a Tuesday noon is outside it.
			tuesday := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
			if opts.Controller.Holds == nil {
				t.Fatal("no holds from the job's run window")
			}
			if hs := opts.Controller.Holds.Applying(tuesday, probeJob); len(hs) != 1 || hs[0].ID != "window:probe" {
				t.Errorf("holds outside the run window %+v, want window:probe", hs)
			}
		},
	},
	"controller": {
		hcl: `controller {
  max_budget         = 7
  quiet_period       = "9s"
  foreground_latency = false
}
`,
		exec: func(t *testing.T, opts throttled.Options, job jobs.Config) {
			c := opts.Controller
			if c.MaxBudget != 7 || c.QuietPeriod != 9*time.Second || !opts.NoForegroundLatency || c.InitialBudget != 7.0/4 {
				t.Errorf("budget %v (initial %v), quiet %s, no foreground latency %v", c.MaxBudget, c.InitialBudget, c.QuietPeriod, opts.NoForegroundLatency)
			}
			if job.MaxRate != 10 {
				t.Errorf("the job's max rate %v, want --max-rate's default 10: max_budget is the cluster's", job.MaxRate)
			}
		},
	},
	"holds":    {hcl: "holds {\n  default_ttl = \"30m\"\n  max_ttl = \"2h\"\n}\n"},
	"listen":   {hcl: "listen {\n  address = \"127.0.0.1:18087\"\n}\n"},
	"token":    {hcl: "token \"ops\" {\n  secret = \"ops-secret-0123456789\"\n  scopes = [\"read\"]\n}\n"},
	"notifier": {hcl: "notifier \"webhook\" {\n  url    = \"http://127.0.0.1:1/hook\"\n  secret = \"hook-secret-0123456789\"\n}\n"},
	"grafana":  {hcl: "grafana {\n  webhook_secret = \"grafana-secret-0123456789\"\n}\n"},
}

const probeProm = `prometheus {
  address        = "http://127.0.0.1:9090"
  basic_user     = "throttled"
  basic_password = "a-password"
}
prometheus_signal "api_p99" {
  query = "max(app_p99_seconds)"
}
signal "api_p99" {
  target = 1.5
}
`

// writeProbe writes a probe of kind (and, for check-config, a listen
// block it lacks) and returns its path and the line of its first block of
// that kind.
func writeProbe(t *testing.T, kind string, listen bool) (path string, line int) {
	t.Helper()
	src := probePrimary + blockProbes[kind].hcl
	if listen && kind != "listen" {
		src += "listen {\n  address = \"127.0.0.1:18087\"\n}\n"
	}
	path = filepath.Join(t.TempDir(), "throttled.hcl")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(src, "\n") {
		if strings.HasPrefix(l, kind+" ") {
			return path, i + 1
		}
	}
	t.Fatalf("the %s probe holds no %s block:\n%s", kind, kind, src)
	return "", 0
}

// Each command does with each kind of block what it declares: a file
// holding one is valid to check-config; exec and signals take what they
// honour (each probe says what that is), accept a file holding a block
// that does not apply to them, and refuse one they refuse, at its
// file:line, naming the command that honours it.
func TestConfigBlocksDoWhatEachCommandDeclares(t *testing.T) {
	kinds := fileBlockKinds(t)
	for _, kind := range kinds {
		probe, ok := blockProbes[kind]
		if !ok {
			t.Errorf("no probe of a %s block: add one to blockProbes", kind)
			continue
		}
		t.Run(kind, func(t *testing.T) {
			path, _ := writeProbe(t, kind, true)
			if r := runCmd("check-config", "--config", path); r.code != exitOK {
				t.Errorf("check-config: exit %d, want a valid file:\n%s", r.code, r.out)
			}
			path, line := writeProbe(t, kind, false)
			at := fmt.Sprintf("%s:%d", path, line)

			o, err := parseExecFlags([]string{"--config", path, "--job", probeJob, "--sql", "DELETE FROM t WHERE id IN (SELECT id FROM t LIMIT $1)"}, noEnv, io.Discard)
			checkDeclared(t, "exec", kind, at, err, probe.exec != nil, func() {
				probe.exec(t, o.openOptions(o.windows(), hclog.NewNullLogger()), o.jobConfig())
			})
			so, err := parseSignalsFlags([]string{"--config", path}, noEnv, io.Discard)
			checkDeclared(t, "signals", kind, at, err, probe.signals != nil, func() { probe.signals(t, so) })
		})
	}
}

// checkDeclared checks what command did with a file holding a block of
// kind at at (err is its parse of the file) against its declaration:
// refused at at, naming the command that honours it; honoured as check
// (which the probe must have) says; not applicable, accepted.
func checkDeclared(t *testing.T, command, kind, at string, err error, probed bool, check func()) {
	t.Helper()
	switch u := blockUses[kind][command]; u.use {
	case refused:
		if err == nil || !strings.Contains(err.Error(), at) || !strings.Contains(err.Error(), u.why) {
			t.Errorf("%s: %v; want the %s block refused at %s, naming %s", command, err, kind, at, u.why)
		}
	case honoured:
		if err != nil {
			t.Errorf("%s: %v; want the %s block honoured", command, err, kind)
			return
		}
		if !probed {
			t.Errorf("%s honours a %s block: its probe must say what it takes from it", command, kind)
			return
		}
		check()
	default:
		if err != nil {
			t.Errorf("%s: %v; a %s block does not apply to it (%s), so the file is accepted", command, err, kind, u.why)
		}
		if probed {
			t.Errorf("%s: a %s block does not apply to it, but its probe checks what it takes from it", command, kind)
		}
	}
}

// A block a command refuses, or of a kind it has no treatment for, is
// refused at its file:line; one it honours or that does not apply to it
// is not.
func TestRefuseBlocks(t *testing.T) {
	path, line := writeProbe(t, "pgbouncer", false)
	at := fmt.Sprintf("%s:%d", path, line)
	if err := refuseBlocks("exec", path, blockUses); err != nil {
		t.Fatalf("exec refuses a file it honours: %v", err)
	}
	unknown := maps.Clone(blockUses)
	delete(unknown, "pgbouncer")
	if err := refuseBlocks("exec", path, unknown); err == nil || !strings.Contains(err.Error(), at+": a pgbouncer block, which throttled exec does not know") {
		t.Errorf("a kind exec has no treatment for: %v; want it refused at %s", err, at)
	}
	refusing := maps.Clone(blockUses)
	refusing["pgbouncer"] = map[string]blockUse{"exec": {refused, "run"}}
	if err := refuseBlocks("exec", path, refusing); err == nil || !strings.Contains(err.Error(), at+": a pgbouncer block, which throttled exec cannot honour: run does") {
		t.Errorf("a kind exec refuses: %v; want it refused at %s, naming run", err, at)
	}
}

// useWords are how docs/CLI.md's table names each treatment.
var useWords = map[use]string{honoured: "honoured", refused: "refused", notApplicable: "not applicable"}

// docs/CLI.md's table of what exec and signals do with each block says
// what blockUses declares, row by row.
func TestCLIDocSaysWhatEachCommandDoesWithEachBlock(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "CLI.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "| block | `exec` | `signals` |")
	if !ok {
		t.Fatal("docs/CLI.md has no table of what exec and signals do with each block")
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(table, "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows[strings.Trim(cells[0], "`")] = cells[1:]
	}
	for _, kind := range fileBlockKinds(t) {
		row, ok := rows[kind]
		if !ok {
			t.Errorf("docs/CLI.md's table has no row for a %s block", kind)
			continue
		}
		for i, cmd := range []string{"exec", "signals"} {
			if want := useWords[blockUses[kind][cmd].use]; i >= len(row) || !strings.HasPrefix(row[i], want) {
				t.Errorf("docs/CLI.md: a %s block with %s: %q; blockUses says %s", kind, cmd, row, want)
			}
		}
	}
}
