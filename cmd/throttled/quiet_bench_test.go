//go:build lab

package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/lab/replay"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// The quiet-primary row of `make bench` (issue 32): a light foreground
// (the replay's pgbench-like mix, open loop, at quietShare of the rate
// this machine's foreground alone sustains) and the idle row's cleanup.
// In one run, with the foreground never stopping, each policy gets three
// windows: the job on, off, on. exec (its defaults, the canary on) is
// paused for its off window by a hold (`throttled pause`, then `throttled
// resume`), as a user would; the fixed rates are plain loops of
// quietFixedBatch-row batches, stopped and started. The foreground's p99
// with the job on, over its p99 in the off windows (all of them, pooled:
// the foreground alone), says what the job cost it; the best fixed rate
// within +10 % is the hindsight oracle.
//
//	go test -run '^$' -bench '^BenchmarkQuietPrimary$' -benchtime 1x -timeout 20m ./cmd/throttled
//
// THROTTLED_QUIET_RATE=tx/s gives the foreground's rate instead of
// measuring the machine (to hold two runs to the same one);
// THROTTLED_QUIET_WINDOW=15s the windows' length; THROTTLED_BENCH_DOC=file
// renders the run between <!-- quiet:begin --> and <!-- quiet:end -->.

const (
	quietTable      = "quiet_events"
	quietJob        = "quiet-cleanup"
	quietShare      = 0.1 // of the rate the foreground alone sustains
	quietFixedBatch = 1000
	quietSlack      = 1.10 // the oracle's p99 bound, over the off window's
	quietWorkers    = 8
	quietScale      = 2 // pgbench branches, 100,000 accounts each
)

// quietFixedRates are the plain loops' rates, batches of quietFixedBatch
// a second: up to exec's own ceiling (--max-rate 4 of 2,000 rows), so the
// oracle's rate is one exec was allowed.
var quietFixedRates = []float64{1, 2, 4, 8}

// quietWindow is one window of one policy.
type quietWindow struct {
	policy, kind string // kind: "on" or "off"
	from, to     time.Time
	rows         int64
	steal        float64
	hist         *replay.Histogram // after the run
}

func (w quietWindow) seconds() float64 { return w.to.Sub(w.from).Seconds() }

// quietPolicy is one policy's three windows and what exec said.
type quietPolicy struct {
	name        string
	rate        float64 // the fixed rate; 0 for exec
	windows     [3]quietWindow
	startup     time.Duration // exec: from its start to its first batch
	where       string
	emergencies []string
}

func (p quietPolicy) onRowsPerSec() float64 {
	on1, on2 := p.windows[0], p.windows[2]
	return float64(on1.rows+on2.rows) / (on1.seconds() + on2.seconds())
}

func (p quietPolicy) p99s() (on, off time.Duration) {
	h := replay.NewHistogram()
	h.Merge(p.windows[0].hist)
	h.Merge(p.windows[2].hist)
	return h.Quantile(0.99), p.windows[1].hist.Quantile(0.99)
}

// ratio is p99 on over the p99 of the policy's own off window.
func (p quietPolicy) ratio() float64 {
	on, off := p.p99s()
	return float64(on) / float64(off)
}

// vsAlone is p99 on over alone's p99: every off window of the run, the
// foreground alone. One 15 s window's p99 strayed from the next one's by
// 2x with nothing changed (fixed-2's on windows read 4.13 and 1.70 ms), so
// the goals and the oracle hold p99 on to the pooled off windows; the
// policy's own off window is shown beside it.
func (p quietPolicy) vsAlone(alone *replay.Histogram) float64 {
	on, _ := p.p99s()
	return float64(on) / float64(alone.Quantile(0.99))
}

func quietWindowLength(b *testing.B) time.Duration {
	if s := os.Getenv("THROTTLED_QUIET_WINDOW"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 5*time.Second {
			b.Fatalf("THROTTLED_QUIET_WINDOW=%q: want a duration of at least 5s", s)
		}
		return d
	}
	return 15 * time.Second
}

func BenchmarkQuietPrimary(b *testing.B) {
	c := pgtest.Cluster(b)
	admin := benchSetup(b, c)
	ctx := context.Background()
	begun, rev := time.Now(), benchRevision()
	win := quietWindowLength(b)
	// Enough old rows for every on window at its policy's most, and a
	// quarter more.
	perSec := idleRate * idleBatch
	for _, r := range quietFixedRates {
		perSec += r * quietFixedBatch
	}
	old := int(math.Ceil(perSec*2*win.Seconds()*1.25/1000)) * 1000
	if err := makeEvents(ctx, c, admin, quietTable, 2*old, old, quietJob); err != nil {
		b.Fatal(err)
	}
	pool := foregroundPoolFor(b, c)
	fg, err := replay.NewForeground(ctx, pool, quietScale, quietWorkers)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "VACUUM (ANALYZE) replay_accounts, replay_tellers, replay_branches"); err != nil {
		b.Fatal(err)
	}
	if err := replay.Settle(ctx, c, admin, 2*time.Minute); err != nil {
		b.Fatal(err)
	}

	// The foreground's rate: quietShare of its knee on this machine.
	var knee float64
	var steps []replay.KneeStep
	rate, given := 0.0, os.Getenv("THROTTLED_QUIET_RATE")
	if given != "" {
		if rate, err = strconv.ParseFloat(given, 64); err != nil || !(rate > 0) {
			b.Fatalf("THROTTLED_QUIET_RATE=%q: want transactions a second", given)
		}
	} else {
		if knee, steps, err = fg.Knee(ctx, 25*float64(runtime.NumCPU()), 3*time.Second, 16, b.Logf); err != nil {
			b.Fatal(err)
		}
		rate = math.Round(quietShare * knee)
		// The ramp's writes, replayed and written back before measuring.
		if err := replay.Settle(ctx, c, admin, 2*time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("foreground at %.0f tx/s (knee %.0f)", rate, knee)

	fctx, stopFg := context.WithCancel(ctx)
	fgDone := make(chan struct{})
	go func() { fg.Run(fctx, rate, 1); close(fgDone) }()
	// The foreground's connections and plans settle before the first window.
	<-time.After(10 * time.Second)

	measure := func(policy, kind string, rows func() int64) quietWindow {
		st := replay.StartSteal()
		w := quietWindow{policy: policy, kind: kind, from: time.Now()}
		r0 := rows()
		<-time.After(win)
		w.rows, w.to, w.steal = rows()-r0, time.Now(), st.Share()
		b.Logf("%-8s %-3s %6d rows (%5.0f/s), steal %s %%", policy, kind, w.rows, float64(w.rows)/w.seconds(), replay.StealText(w.steal))
		return w
	}
	var pols []quietPolicy
	pols = append(pols, quietExec(b, c, admin, measure))
	for _, r := range quietFixedRates {
		pols = append(pols, quietFixed(b, c, r, measure))
	}
	stopFg()
	<-fgDone
	for i := range pols {
		for j := range pols[i].windows {
			w := &pols[i].windows[j]
			w.hist = fg.Window(w.from, w.to)
		}
	}
	ok, failed, _ := fg.Counts()
	alone := replay.NewHistogram()
	for _, p := range pols {
		alone.Merge(p.windows[1].hist)
	}

	ex := pols[0]
	oracle := -1
	for i, p := range pols[1:] {
		if p.vsAlone(alone) <= quietSlack && (oracle < 0 || p.onRowsPerSec() > pols[oracle].onRowsPerSec()) {
			oracle = i + 1
		}
	}
	ofOracle := 0.0
	if oracle > 0 {
		ofOracle = ex.onRowsPerSec() / pols[oracle].onRowsPerSec()
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(rate, "fg-tx/s")
	b.ReportMetric(ex.vsAlone(alone), "exec-p99-on/alone")
	b.ReportMetric(ex.ratio(), "exec-p99-on/off")
	b.ReportMetric(ex.onRowsPerSec(), "exec-rows/s")
	if oracle > 0 {
		b.ReportMetric(pols[oracle].onRowsPerSec(), "oracle-rows/s")
	}
	b.ReportMetric(ofOracle, "of-oracle")
	doc := quietReport(rev, pols, alone, oracle, old, rate, knee, given != "", steps, win, ok, failed, time.Since(begun))
	b.Log("\n" + doc)
	writeBenchDoc(b, "quiet", doc)
}

func foregroundPoolFor(b *testing.B, c *pgcluster.Cluster) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = quietWorkers, quietWorkers
	cfg.ConnConfig.RuntimeParams["application_name"] = "quiet_foreground"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	// Every connection open now, so no window pays for connecting.
	var conns []*pgxpool.Conn
	for range quietWorkers {
		conn, err := pool.Acquire(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, conn)
	}
	for _, conn := range conns {
		conn.Release()
	}
	return pool
}

type measureFunc func(policy, kind string, rows func() int64) quietWindow

// quietExec runs exec on the quiet table: on from its first batch, off
// under a hold, on again after its release.
func quietExec(b *testing.B, c *pgcluster.Cluster, admin *pgxpool.Pool, measure measureFunc) quietPolicy {
	b.Helper()
	ctx := context.Background()
	if err := forgetDecision(ctx, admin); err != nil {
		b.Fatal(err)
	}
	rows := func() int64 {
		var n int64
		if err := admin.QueryRow(ctx, `SELECT coalesce((SELECT rows FROM throttled.checkpoints WHERE job = $1), 0)`, quietJob).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	w, out := newExecWatch()
	var errOut pgtest.Buffer
	ectx, stop := context.WithCancel(ctx)
	defer stop()
	exited := make(chan int, 1)
	start := time.Now()
	go func() { exited <- run(ectx, execArgsFor(c, quietJob, quietTable), out, &errOut); out.Close() }()
	pgtest.Eventually(b, time.Minute, func() error {
		select {
		case code := <-exited:
			b.Fatalf("exec ended before its first batch: exit %d: %s", code, errOut.String())
		default:
		}
		if rows() == 0 {
			return fmt.Errorf("exec has done no batch: %s", w.whereText())
		}
		return nil
	})
	p := quietPolicy{name: "exec", startup: time.Since(start)}
	p.windows[0] = measure(p.name, "on", rows)
	hold := func(verb string) {
		var out, errOut bytes.Buffer
		if code := run(ctx, []string{verb, "--job", quietJob, "--reason", "bench: the job's " + verb + " window", "--primary-dsn", c.Primary.DSN(pgcluster.RoleAdmin)}, &out, &errOut); code != exitOK {
			b.Fatalf("throttled %s: exit %d: %s", verb, code, errOut.String())
		}
	}
	hold("pause")
	pgtest.Eventually(b, 15*time.Second, func() error {
		if pr, _ := w.progress(); pr.State != "paused" {
			return fmt.Errorf("exec is %s under the hold", pr.State)
		}
		return nil
	})
	p.windows[1] = measure(p.name, "off", rows)
	hold("resume")
	p.windows[2] = measure(p.name, "on", rows)
	stop()
	if code := <-exited; code != exitInterrupted && code != exitOK {
		b.Fatalf("exec: exit %d: %s", code, errOut.String())
	}
	p.where, p.emergencies = w.whereText(), w.emergencies()
	return p
}

// quietFixed runs the plain loop at rate: on, stopped, on again.
func quietFixed(b *testing.B, c *pgcluster.Cluster, rate float64, measure measureFunc) quietPolicy {
	b.Helper()
	ctx := context.Background()
	name := "fixed-" + strconv.FormatFloat(rate, 'g', -1, 64)
	pool, err := loopPool(ctx, c, "quiet_"+name)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	var rows atomic.Int64
	count := func(n int64) { rows.Add(n) }
	startLoop := func() (stop func()) {
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, _, _, err := plainLoop(lctx, pool, benchDelete(quietTable), quietFixedBatch, rate, count)
			done <- err
		}()
		return func() {
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
	}
	p := quietPolicy{name: name, rate: rate}
	stop := startLoop()
	p.windows[0] = measure(name, "on", rows.Load)
	stop()
	p.windows[1] = measure(name, "off", rows.Load)
	stop = startLoop()
	p.windows[2] = measure(name, "on", rows.Load)
	stop()
	return p
}

// quietReport renders the quiet row's run as markdown.
func quietReport(rev string, pols []quietPolicy, alone *replay.Histogram, oracle, old int, rate, knee float64, given bool, steps []replay.KneeStep, win time.Duration, ok, failed int64, took time.Duration) string {
	var bd strings.Builder
	how := fmt.Sprintf("%.0f tx/s, a tenth of %.0f tx/s, the last rate of a ramp of the foreground alone (from %.0f tx/s, ×1.5 a 3 s step) before its p99 bent "+
		"(over 4× the first steps' or fewer than 90 %% of arrivals done, twice at the same rate and once at the next: the replay calibration's coarse ramp)", rate, knee, 25*float64(runtime.NumCPU()))
	if given {
		how = fmt.Sprintf("%.0f tx/s, given by THROTTLED_QUIET_RATE", rate)
	}
	fmt.Fprintf(&bd, "Generated by `make bench` (`BenchmarkQuietPrimary`, cmd/throttled/quiet_bench_test.go) at %s; never edited by hand. "+
		"Machine: %d cores (%s/%s), %s; the whole row took %s. "+
		"On the throwaway primary and streaming replica, migrated (the canary runs), a light foreground: the replay's pgbench-like mix "+
		"(TPC-B-like writes, half read-only, scale %d, %d connections), open loop at %s; latency from each transaction's scheduled start. "+
		"The cleanup is the idle row's statement on a table whose older half is %d rows. In one run, the foreground never stopping, "+
		"each policy has three %s windows: job on, off, on. exec is the idle row's command (its defaults, the canary on), its on windows "+
		"from its first batch, paused for the off window by `throttled pause --job` and resumed by `throttled resume --job`; fixed-N is a "+
		"plain loop of %d-row batches at N a second, stopped for the off window. p99 on is over both on windows' transactions; "+
		"on / alone is it over the p99 of every off window of the run pooled (the foreground alone, %.0f s of it), on / off over the "+
		"policy's own off window's (one 15 s window's p99 strays by more than 10 %% from the next one's on its own). The hindsight oracle "+
		"is the fixed rate with the most rows whose on / alone is within %.2f. Rows are from exec's checkpoint or the loop's own count. Steal is the hypervisor's share of the CPU time wanted, per window.\n\n",
		rev, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), took.Round(time.Second),
		quietScale, quietWorkers, how, old, win, quietFixedBatch, float64(len(pols))*win.Seconds(), quietSlack)
	if !given && len(steps) > 0 {
		var parts []string
		for _, s := range steps {
			parts = append(parts, fmt.Sprintf("%.0f→%.0f (p99 %.1f ms, steal %s %%)", s.Rate, s.TPS, ms(s.P99), replay.StealText(s.Steal)))
		}
		fmt.Fprintf(&bd, "The ramp, offered → done tx/s: %s.\n\n", strings.Join(parts, "; "))
	}
	fmt.Fprintf(&bd, "The foreground alone (every off window): p99 %.2f ms over %d transactions.\n\n", ms(alone.Quantile(0.99)), alone.Count())
	bd.WriteString("| policy | rows/s on | p99 on ms | on / alone | within +10 % | p99 own off ms | on / own off | of the oracle's rows |\n|---|---:|---:|---:|---|---:|---:|---:|\n")
	for i, p := range pols {
		on, off := p.p99s()
		within := "no"
		if p.vsAlone(alone) <= quietSlack {
			within = "yes"
		}
		name := p.name
		if i == oracle {
			name += " (oracle)"
		}
		of := "–"
		if oracle > 0 {
			of = fmt.Sprintf("%.2f", p.onRowsPerSec()/pols[oracle].onRowsPerSec())
		}
		fmt.Fprintf(&bd, "| %s | %.0f | %.2f | %.2f | %s | %.2f | %.2f | %s |\n", name, p.onRowsPerSec(), ms(on), p.vsAlone(alone), within, ms(off), p.ratio(), of)
	}
	bd.WriteString("\nEvery window, in the order they ran:\n\n| policy | window | seconds | rows | rows/s | transactions | p99 ms | steal % |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range pols {
		for _, w := range p.windows {
			fmt.Fprintf(&bd, "| %s | %s | %.1f | %d | %.0f | %d | %.2f | %s |\n", p.name, w.kind, w.seconds(), w.rows, float64(w.rows)/w.seconds(),
				w.hist.Count(), ms(w.hist.Quantile(0.99)), replay.StealText(w.steal))
		}
	}
	ex := pols[0]
	fmt.Fprintf(&bd, "\nThe foreground: %d transactions done, %d failed or not started. exec's first batch came %.1f s after its start; "+
		"where its time went (its summary's why_slow, or its progress objects, one a second, state: binding, while it has none): %s; emergency cuts named: %d.\n",
		ok, failed, ex.startup.Seconds(), ex.where, len(ex.emergencies))
	for _, e := range ex.emergencies {
		fmt.Fprintf(&bd, "\n- %s", e)
	}
	gentle := "not met"
	if ex.vsAlone(alone) <= quietSlack {
		gentle = "met"
	}
	fmt.Fprintf(&bd, "\n\nexec's p99 on / alone: **%.2f** (goal at most %.2f: %s; on / its own off window %.2f). ", ex.vsAlone(alone), quietSlack, gentle, ex.ratio())
	if oracle > 0 {
		fast := "not met"
		if ex.onRowsPerSec() >= 0.8*pols[oracle].onRowsPerSec() {
			fast = "met"
		}
		fmt.Fprintf(&bd, "exec's rows/s on over the oracle's (%s, %.0f rows/s): **%.2f** (goal at least 0.8: %s).\n",
			pols[oracle].name, pols[oracle].onRowsPerSec(), ex.onRowsPerSec()/pols[oracle].onRowsPerSec(), fast)
	} else {
		fmt.Fprintf(&bd, "No fixed rate kept p99 within +10 %% of the foreground alone's in this run: there is no oracle to hold exec's %.0f rows/s to.\n", ex.onRowsPerSec())
	}
	return bd.String()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
