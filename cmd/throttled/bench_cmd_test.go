package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/pgtest"
	"github.com/throttled/throttled/internal/replay"
)

func TestParseReplayFlags(t *testing.T) {
	o, err := parseReplayFlags([]string{"--short"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.cfg.Scenarios, ",") != "2026-09-13,cpu-hog" || len(o.cfg.Policies) != 4 || o.cfg.RunLength != 15*time.Second || o.cfg.Repeat != 1 {
		t.Errorf("--short: scenarios %v, policies %v, run %s, repeat %d", o.cfg.Scenarios, o.cfg.Policies, o.cfg.RunLength, o.cfg.Repeat)
	}
	o, err = parseReplayFlags([]string{"--short", "--repeat", "2", "--warmup", "1s"}, io.Discard)
	if err != nil || o.cfg.Repeat != 2 || o.cfg.Warmup != time.Second {
		t.Errorf("--short --repeat 2 --warmup 1s: repeat %d, warm-up %s, %v", o.cfg.Repeat, o.cfg.Warmup, err)
	}
	o, err = parseReplayFlags([]string{"--short", "--policy", "adaptive", "--fixed-rates", "1,2.5"}, io.Discard)
	if err != nil || strings.Join(o.cfg.Policies, ",") != "adaptive" || len(o.cfg.FixedRates) != 2 || o.cfg.FixedRates[1] != 2.5 {
		t.Errorf("--short --policy adaptive: %v, %v, %v", o.cfg.Policies, o.cfg.FixedRates, err)
	}
	o, err = parseReplayFlags([]string{"--foreground-target", "1.15"}, io.Discard)
	if err != nil || o.cfg.ForegroundTarget != 1.15 {
		t.Errorf("--foreground-target 1.15: %v, %v", o.cfg.ForegroundTarget, err)
	}
	o, err = parseReplayFlags([]string{"--held-baseline"}, io.Discard)
	if err != nil || !o.cfg.HeldBaseline {
		t.Errorf("--held-baseline: %v, %v", o.cfg.HeldBaseline, err)
	}
	o, err = parseReplayFlags([]string{"--max-steal", "-1", "--reruns", "0"}, io.Discard)
	if err != nil || o.cfg.MaxSteal != -1 || o.cfg.Reruns >= 0 {
		t.Errorf("--max-steal -1 --reruns 0: max steal %v, reruns %d (want none: negative), %v", o.cfg.MaxSteal, o.cfg.Reruns, err)
	}
	o, err = parseReplayFlags(nil, io.Discard)
	if err != nil || o.cfg.Scenarios != nil || o.cfg.Policies != nil {
		t.Errorf("defaults: %v, %v, %v (want every scenario and policy: nil lists)", o.cfg.Scenarios, o.cfg.Policies, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "nope"}, `--scenario: unknown "nope"`},
		{[]string{"--policy", "adaptive,nope"}, `--policy: unknown "nope"`},
		{[]string{"--fixed-rates", "1,-2"}, `--fixed-rates: "-2"`},
		{[]string{"--run", "1s"}, "--run must be at least 5s"},
		{[]string{"--cores", "0"}, "--cores must be positive"},
		{[]string{"--rate", "-3"}, "--rate must be positive"},
		{[]string{"--batch-target", "0s"}, "--batch-target must be positive"},
		{[]string{"--max-batch-size", "0"}, "--max-batch-size must be at least 1"},
		{[]string{"--repeat", "-1"}, "--repeat must be at least 1"},
		{[]string{"--warmup", "-1s"}, "--warmup must not be negative"},
		{[]string{"--foreground-target", "1"}, "--foreground-target is a multiple of the baseline latency above 1"},
		{[]string{"--foreground-target", "NaN"}, "--foreground-target is a multiple"},
		{[]string{"--max-steal", "0"}, "--max-steal is a share of the CPU time between 0 and 1"},
		{[]string{"--max-steal", "3"}, "--max-steal is a share"},
		{[]string{"--max-steal", "NaN"}, "--max-steal is a share"},
	} {
		if _, err := parseReplayFlags(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

// TestBenchReplay runs a very short seeded replay (the CPU hog, foreground
// alone, unthrottled and adaptive at a foreground-latency target of its
// own, 8 s each, twice, at a fixed arrival rate) on
// the package's pair, and checks what must hold whatever the machine's
// speed.
func TestBenchReplay(t *testing.T) {
	c := pgtest.Cluster(t)
	dir := t.TempDir()
	doc := filepath.Join(dir, "BENCHMARKS.md")
	head := "# Benchmarks\n\n## Micro\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
	tail := "\nAfter the section.\n"
	if err := os.WriteFile(doc, []byte(head+replay.BeginMarker+"\nstale numbers\n"+replay.EndMarker+tail), 0o644); err != nil {
		t.Fatal(err)
	}
	o := replayOptions{cfg: replay.Config{Scenarios: []string{"cpu-hog"}, Policies: []string{replay.PolicyForeground, replay.PolicyUnthrottled, replay.PolicyAdaptive},
		RunLength: 8 * time.Second, Warmup: 2 * time.Second, Repeat: 2, ForegroundTarget: 1.5, Rate: 100, Rows: 1_000_000, Seed: 7}, outDir: filepath.Join(dir, "out"), doc: doc}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := benchReplay(ctx, c, o, "throttled bench replay (test)", &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var order []string
	for _, r := range rep.Results {
		order = append(order, fmt.Sprintf("%s/%d", r.Policy, r.Rep))
		if runtime.GOOS == "linux" && (r.Steal < 0 || r.Steal > 1) {
			t.Errorf("%s: steal share %v, want one in [0, 1] (this is Linux)", r.Policy, r.Steal)
		}
		if r.Samples < 20 || r.Unreadable == r.Samples {
			t.Errorf("%s: %d samples, %d unreadable: the independent sampler saw nothing", r.Policy, r.Samples, r.Unreadable)
		}
		// Only the measured window counts: at 100 tx/s, about 800
		// transactions, not the 1,000 the warm-up would add.
		if r.Completed < 100 || r.Completed > 900 || r.P50 <= 0 || r.P99 < r.P50 || r.P999 < r.P99 {
			t.Errorf("%s: %d transactions, p50 %s p99 %s p99.9 %s", r.Policy, r.Completed, r.P50, r.P99, r.P999)
		}
		// The worst second lies in the 8 s window, and its p99 is no
		// more than the run's largest latency, which p99.9 is under
		// 1,000 transactions.
		if r.WorstSecond < 0 || r.WorstSecond > 8 || r.WorstSecondP99 <= 0 || r.WorstSecondP99 > r.P999 {
			t.Errorf("%s: worst second %d at %s (p99.9 of the run %s)", r.Policy, r.WorstSecond, r.WorstSecondP99, r.P999)
		}
		if runtime.GOOS == "linux" && (r.WorstSecondSteal < 0 || r.WorstSecondSteal > 1) {
			t.Errorf("%s: worst second's steal share %v, want one in [0, 1] (this is Linux)", r.Policy, r.WorstSecondSteal)
		}
	}
	// The second repetition runs in reverse.
	if got := strings.Join(order, " "); got != "foreground/1 unthrottled/1 adaptive/1 adaptive/2 unthrottled/2 foreground/2" {
		t.Errorf("runs in the order %s", got)
	}
	byPolicy := map[string]replay.Summary{}
	for _, s := range rep.Summaries {
		byPolicy[s.Policy] = s
		if _, err := os.Stat(s.Plot); err != nil {
			t.Errorf("%s: plot: %v", s.Policy, err)
		}
		// A run kept over the steal limit is left out of a row with a
		// quiet one; every run is counted or left out, and at least one
		// is counted.
		if s.Runs < 1 || s.Runs+s.LeftOut != 2 {
			t.Errorf("%s: the median of %d runs, %d left out for steal; want 2 in all, at least 1 counted", s.Policy, s.Runs, s.LeftOut)
		}
	}
	if len(byPolicy) != 3 {
		t.Fatalf("summaries %v, want foreground, unthrottled and adaptive", rep.Summaries)
	}
	fg, un, ad := byPolicy[replay.PolicyForeground], byPolicy[replay.PolicyUnthrottled], byPolicy[replay.PolicyAdaptive]
	if fg.Rows != 0 || fg.P99VsForeground != 1 {
		t.Errorf("foreground alone: %d rows cleaned, p99 ratio %v; want 0 and 1", fg.Rows, fg.P99VsForeground)
	}
	if un.Rows <= ad.Rows || ad.Rows <= 0 {
		t.Errorf("rows cleaned: unthrottled %d, adaptive %d; want unthrottled > adaptive > 0 (the hog must slow the adaptive job)", un.Rows, ad.Rows)
	}
	// On a fast machine unthrottled may clean every old row within a
	// run; then that run must have cleaned exactly that many, no more.
	// (The summary's rows are a median: one repetition may finish and
	// the other not.)
	for _, r := range rep.Results {
		if r.Finished && r.Rows != o.cfg.Rows/2 {
			t.Errorf("%s/%d finished with %d rows cleaned, want all %d old rows\n%s", r.Policy, r.Rep, r.Rows, o.cfg.Rows/2, out.String())
		}
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if !strings.HasPrefix(got, head+replay.BeginMarker+"\n") || !strings.HasSuffix(got, replay.EndMarker+tail) {
		t.Errorf("the document changed outside the section:\n%s", got)
	}
	for _, want := range []string{"### cpu-hog", "| **adaptive** |", "throttled bench replay (test)", fmt.Sprintf("%d cores", rep.Cores), "PostgreSQL 1",
		"repeated 2 times", "foreground-latency target, 1.5 (--foreground-target)"} {
		if !strings.Contains(got, want) {
			t.Errorf("section lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "stale numbers") {
		t.Error("the old section is still there")
	}
	if _, err := os.Stat(filepath.Join(o.outDir, "results.json")); err != nil {
		t.Error(err)
	}
}

// --from renders a finished replay's results.json again, running nothing:
// it writes beside it unless --out says where, rewrites the document
// with --doc, and refuses the flags that would shape a run.
func TestBenchReplayFromRendersAgain(t *testing.T) {
	dir := t.TempDir()
	results := filepath.Join(dir, "results.json")
	js := `{"Repeat": 1, "Rate": 2000, "MaxSteal": 0.03, "Reruns": 2, "Command": "throttled bench replay --repeat 1", "Results": [
		{"Scenario": "surge", "Policy": "foreground", "Rep": 1, "P99": 3000000, "Steal": 0.01},
		{"Scenario": "surge", "Policy": "adaptive", "Rep": 1, "P99": 4000000, "Steal": 0.01},
		{"Scenario": "surge", "Policy": "foreground-again", "Rep": 1, "P99": 13000000, "Steal": 0.16, "Disturbed": true}]}`
	if err := os.WriteFile(results, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(dir, "BENCHMARKS.md")
	if err := os.WriteFile(doc, []byte("# Benchmarks\n\n"+replay.BeginMarker+"\nold\n"+replay.EndMarker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"bench", "replay", "--from", results, "--doc", doc}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	got, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Regenerated by `throttled bench replay --repeat 1`, its tables rendered again from its results.json by `throttled bench replay --from " + results + " --doc " + doc + "`",
		"| 1.33 |", "(1 over, left out)"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("document lacks %q:\n%s", want, got)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "replay.md"))
	if err != nil || !strings.Contains(string(md), "rendered again") {
		t.Errorf("replay.md beside the results: %v\n%s", err, md)
	}
	if _, err := os.Stat("out/replay/results.json"); err == nil {
		t.Error("--from without --out wrote the default out/replay, not beside the results it rendered")
	}

	errOut.Reset()
	code := run(context.Background(), []string{"bench", "replay", "--from", results, "--scenario", "surge", "--repeat", "2"}, io.Discard, &errOut)
	if code != exitUsage || !strings.Contains(errOut.String(), "--scenario, --repeat would not apply") {
		t.Errorf("--from --scenario --repeat: exit %d, %q; want a usage error naming both", code, errOut.String())
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"bench", "replay", "--from", filepath.Join(dir, "none.json")}, io.Discard, &errOut); code == exitOK || !strings.Contains(errOut.String(), "none.json") {
		t.Errorf("--from a missing file: exit %d, %q; want a failure naming it", code, errOut.String())
	}
}
