package replay

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A block runs every policy's windows in rounds, an alone window between
// each two, and keeps every second: latency, steal, rows and the
// independent sampler's load. The job works only in its own windows.
func TestBlockKeepsEverySecond(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Batches of at most 300 keys, so unthrottled's windows do not empty
	// a small table.
	be, err := OpenBlockEnv(ctx, c, 2, 2, 8, 2_000_000, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	b, err := RunBlock(ctx, be, BlockConfig{Cluster: c, Scenario: "quiet", Rate: 2000, Pairs: 3, OpenPairs: 3, WindowSeconds: 2, Rows: 2_000_000, MaxBatch: 300,
		Policies: []string{PolicyAA, PolicyUnthrottled, PolicyFixed, PolicyAdaptive}, FixedFractions: []float64{0.1}, Warmup: 2 * time.Second,
		Probe: true, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	// 4 policies x 3 pairs, an alone window before, between and after.
	if len(b.Windows) != 25 || len(b.Seconds) != 50 {
		t.Fatalf("%d windows, %d seconds; want 25 and 50", len(b.Windows), len(b.Seconds))
	}
	for i, w := range b.Windows {
		if (i%2 == 0) != (w.Policy == PolicyAlone) {
			t.Fatalf("window %d is %s: every other window must be the foreground alone", i, w.Label())
		}
	}
	if len(b.Finished) > 0 {
		t.Fatalf("%v ran out of old rows; the test's table is too small", b.Finished)
	}
	rowsIn := map[string]int64{}
	for _, w := range b.Windows {
		for _, s := range b.Seconds[w.Start+w.Dropped : w.End] {
			rowsIn[w.Label()] += s.Rows
		}
	}
	fixed := ""
	for _, p := range b.Policies() {
		if p != PolicyAA && p != PolicyUnthrottled && p != PolicyAdaptive {
			fixed = p
		}
	}
	if rowsIn[PolicyUnthrottled] <= rowsIn[fixed] || rowsIn[fixed] <= 0 {
		t.Errorf("rows by window: %v; want unthrottled > %s > 0", rowsIn, fixed)
	}
	// A batch granted as its window closed may finish, or be counted,
	// a moment later; past the alone windows' first second that is at
	// most a stray batch, never a job at work.
	all := int64(0)
	for _, n := range rowsIn {
		all += n
	}
	if rowsIn[PolicyAA] > all/100 || rowsIn[PolicyAlone] > all/100 {
		t.Errorf("rows by window: %v; a job worked outside its windows (past each alone window's first second)", rowsIn)
	}
	var tx uint64
	for _, s := range b.Seconds {
		tx += s.Lat.Count()
		// Every transaction's latency is split in two: the measuring
		// process's own wait and the rest.
		if n := s.Lat.Count(); s.Client.Count() != n || s.Server.Count() != n {
			t.Errorf("second %d: %d transactions, %d client parts, %d server parts", s.T, n, s.Client.Count(), s.Server.Count())
		}
		if runtime.GOOS == "linux" && (s.Steal < 0 || s.Steal > 1) {
			t.Errorf("second %d: steal %v", s.T, s.Steal)
		}
		if s.Load < 0 {
			t.Errorf("second %d: the independent sampler read no load", s.T)
		}
	}
	// 200 tx/s for 50 s.
	if tx < 6500 || tx > 12000 {
		t.Errorf("%d transactions in the block's seconds, want about 10000", tx)
	}
	// The instrument's canary commits 20 times a second under every
	// window; adaptive's own canary and budget are read in its windows
	// only.
	probed, canaryIn, canaryOut := 0, 0, 0
	for _, w := range b.Windows {
		for _, s := range b.Seconds[w.Start:w.End] {
			if s.Probe != nil && s.Probe.Count() >= 10 {
				probed++
			}
			switch {
			case w.Policy == PolicyAdaptive && s.Canary > 0 && s.Budget > 0 && s.Batch > 0:
				canaryIn++
			case w.Policy != PolicyAdaptive && (s.Canary != 0 || s.Budget != 0 || s.Batch != 0):
				canaryOut++
			}
		}
	}
	if probed < len(b.Seconds)*9/10 {
		t.Errorf("%d of %d seconds hold at least 10 of the probe's commits; want nearly all", probed, len(b.Seconds))
	}
	if canaryIn < 3 || canaryOut > 0 {
		t.Errorf("adaptive's canary read in %d of its 6 seconds and in %d seconds of other windows; want most of its own and none elsewhere", canaryIn, canaryOut)
	}
}

// While the benchmark's tables exist, autovacuum wakes every
// AutovacuumNaptime (the foreground's branch rows would otherwise bloat
// for a minute at a time); Close puts the server's own setting back.
func TestBlockEnvWakesAutovacuumOften(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	naptime := func() string {
		t.Helper()
		var s string
		if err := conn.QueryRow(ctx, "SHOW autovacuum_naptime").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// pg_reload_conf only signals the server; each backend applies the
	// file when it next takes the signal, so the setting is polled.
	becomes := func(want, when string) {
		t.Helper()
		pgtest.Eventually(t, 10*time.Second, func() error {
			if got := naptime(); got != want {
				return fmt.Errorf("autovacuum_naptime %s %s, want %s", got, when, want)
			}
			return nil
		})
	}
	before := naptime()
	be, err := OpenBlockEnv(ctx, c, 2, 2, 2, 10_000, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	becomes(AutovacuumNaptime, "with the tables open")
	be.Close()
	becomes(before, "after Close (the server's own setting)")
}
