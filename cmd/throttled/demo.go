package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled/internal/pgcluster"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// scene is one step of the demo: a fault held for a while.
type scene struct {
	name  string
	hold  time.Duration
	start func(ctx context.Context, c *pgcluster.Cluster) (stop func(), err error)
}

func demoScenes(scale float64) []scene {
	d := func(s float64) time.Duration { return time.Duration(s * scale * float64(time.Second)) }
	return []scene{
		{"idle", d(6), nil},
		{"cpu: 2 busy sessions", d(12), func(ctx context.Context, c *pgcluster.Cluster) (func(), error) {
			s, err := c.CPULoad(ctx, 2, d(60), "")
			if err != nil {
				return nil, err
			}
			return func() { s.Stop() }, nil
		}},
		{"locks: 3 blocked sessions", d(6), func(ctx context.Context, c *pgcluster.Cluster) (func(), error) {
			s, err := c.LockWaits(ctx, 3)
			if err != nil {
				return nil, err
			}
			return func() { s.Stop() }, nil
		}},
		{"replay paused + writes", d(12), func(ctx context.Context, c *pgcluster.Cluster) (func(), error) {
			if err := c.PauseReplay(ctx); err != nil {
				return nil, err
			}
			wctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Go(func() {
				t := time.NewTicker(500 * time.Millisecond)
				defer t.Stop()
				for {
					_ = c.WriteWAL(wctx, 256<<10)
					select {
					case <-wctx.Done():
						return
					case <-t.C:
					}
				}
			})
			return func() {
				cancel()
				wg.Wait()
				_ = c.ResumeReplay(context.Background())
			}, nil
		}},
		{"replica stopped", d(8), func(ctx context.Context, c *pgcluster.Cluster) (func(), error) {
			if err := c.StopReplica(ctx); err != nil {
				return nil, err
			}
			return func() { _ = c.StartReplica(context.Background()) }, nil
		}},
		{"recovered", d(6), nil},
	}
}

func runDemo(ctx context.Context, args []string, out, errOut io.Writer) int {
	var lf logFlags
	var scale float64
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.Float64Var(&scale, "scale", 1, "multiply every scene's length (0.2 for a quick run)")
	lf.register(fs)
	// The table shows what the warnings would say; keep the screen clean.
	_ = fs.Set("log-level", "error")
	if err := parse(fs, args, errOut); err != nil {
		return fail(errOut, "demo", err)
	}
	if scale <= 0 {
		return fail(errOut, "demo", fmt.Errorf("%w: --scale must be positive, got %v", errUsage, scale))
	}
	log, err := lf.logger(errOut)
	if err != nil {
		return fail(errOut, "demo", err)
	}
	if err := demo(ctx, log, scale, out); err != nil {
		return fail(errOut, "demo", err)
	}
	return exitOK
}

func demo(ctx context.Context, log hclog.Logger, scale float64, out io.Writer) error {
	clog := log.Named("cluster")
	fmt.Fprintln(out, "Starting a throwaway PostgreSQL primary and streaming replica...")
	c, err := pgcluster.Start(ctx, pgcluster.Options{Log: func(f string, a ...any) { clog.Info(fmt.Sprintf(f, a...)) }})
	if err != nil {
		return err
	}
	defer func() {
		c.Stop()
		fmt.Fprintln(out, "Primary and replica stopped and removed.")
	}()
	const cores = 2
	p, err := signals.New(signals.Config{
		PrimaryDSN:  c.Primary.DSN(pgcluster.RoleMonitor),
		ReplicaDSNs: []string{c.Replica.DSN(pgcluster.RoleMonitor)},
		Cores:       cores,
		Logger:      log.Named("signals"),
	})
	if err != nil {
		return err
	}
	if err := p.Connect(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "Sampling as %s (pg_monitor, not superuser) every %s; %d cores configured.\n", pgcluster.RoleMonitor, signals.DefaultInterval, cores)
	ctl, err := demoController()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Deciding every second for job %q, which here only reports using its whole allocation.\n", demoJob)
	fmt.Fprintln(out, "Rules: primary_load target 0.7, critical 1.0 (3 samples), connection headroom 10%, replica1 required (lag target 2 s); quiet period shortened to 8 s for the demo.")
	fmt.Fprintln(out)

	rctx, stopPoller := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = p.Run(rctx) })
	defer func() { stopPoller(); wg.Wait() }()

	scenes := demoScenes(scale)
	stats := make([]sceneStats, len(scenes))
	var mu sync.Mutex
	current := 0
	start := time.Now()

	// The printer: one row a second, for the scene in progress.
	pctx, stopPrinter := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	pwg.Go(func() {
		lastReason, carry := "", 0.0
		fmt.Fprintln(out, demoHeader)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
			snap := p.Snapshot()
			d := ctl.Step(snap.At, snap)
			// The job uses everything it is given, a fraction of a batch
			// carried to the next second.
			carry += d.Jobs[demoJob].Rate
			for ; carry >= 1; carry-- {
				ctl.Report(demoJob, throttle.Feedback{Rows: 1000, Duration: 100 * time.Millisecond})
			}
			mu.Lock()
			i := current
			stats[i].add(snap, d)
			mu.Unlock()
			fmt.Fprintln(out, demoRow(time.Since(start), scenes[i].name, snap, d))
			for _, e := range d.Events {
				tag := "event"
				if e.Page() {
					tag = "PAGE "
				}
				fmt.Fprintf(out, "         %s %s\n", tag, e.Message)
			}
			if d.Reason != lastReason && d.Mode != throttle.ModeRunning {
				fmt.Fprintf(out, "         why: %s\n", d.Reason)
			}
			lastReason = d.Reason
		}
	})
	var sceneErr error
	for i, sc := range scenes {
		mu.Lock()
		current = i
		stats[i].name = sc.name
		mu.Unlock()
		var stop func()
		if sc.start != nil {
			if stop, sceneErr = sc.start(ctx, c); sceneErr != nil {
				sceneErr = fmt.Errorf("scene %q: %w", sc.name, sceneErr)
				break
			}
		}
		select {
		case <-ctx.Done():
			sceneErr = ctx.Err()
		case <-time.After(sc.hold):
		}
		if stop != nil {
			stop()
		}
		if sceneErr != nil {
			break
		}
	}
	stopPrinter()
	pwg.Wait()
	writeSummary(out, stats)
	return sceneErr
}

const demoHeader = "  time  scene                      load  (raw)  io  lock  free  used  replica1 lag        replay   | mode       budget  binding"

// demoJob is the job the demo's controller paces.
const demoJob throttle.Job = "purge"

func demoController() (*throttle.Controller, error) {
	c, err := throttle.New(throttle.Config{
		Replicas:      map[string]throttle.ReplicaPolicy{pgcluster.ReplicaName: throttle.ReplicaRequired},
		MaxBudget:     100,
		InitialBudget: 10,
		QuietPeriod:   8 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	return c, c.Register(throttle.JobConfig{Name: demoJob})
}

func demoRow(elapsed time.Duration, scene string, snap signals.Snapshot, d throttle.Decision) string {
	cell := func(name signals.Name, replica string, f func(signals.Sample) string) string {
		var labels map[string]string
		if replica != "" {
			labels = map[string]string{signals.LabelReplica: replica}
		}
		s, ok := snap.Get(name, labels)
		switch {
		case !ok:
			return "?"
		case s.Err != nil:
			return shortErr(s.Err)
		case snap.Stale(s):
			return "STALE"
		}
		return f(s)
	}
	load := cell(signals.PrimaryLoad, "", func(s signals.Sample) string { return fmt.Sprintf("%4.2f  %4.2f", s.Value, s.Raw) })
	io := cell(signals.PrimaryIOWait, "", func(s signals.Sample) string { return fmt.Sprintf("%.0f", s.Raw) })
	lock := cell(signals.PrimaryLockWait, "", func(s signals.Sample) string { return fmt.Sprintf("%.0f", s.Raw) })
	free := cell(signals.ConnectionHeadroom, "", func(s signals.Sample) string { return fmt.Sprintf("%.0f", s.Raw) })
	used := cell(signals.ConnectionUsedFraction, "", func(s signals.Sample) string { return fmt.Sprintf("%.0f%%", 100*s.Raw) })
	lagB := cell(signals.ReplicaLagBytes, pgcluster.ReplicaName, func(s signals.Sample) string { return formatBytes(s.Raw) })
	lagS := cell(signals.ReplicaLagSeconds, pgcluster.ReplicaName, func(s signals.Sample) string { return fmt.Sprintf("%.1fs", s.Raw) })
	lag := lagB + " / " + lagS
	if lagB == lagS {
		lag = lagB
	}
	paused := cell(signals.ReplicaReplayPaused, pgcluster.ReplicaName, func(s signals.Sample) string {
		if s.Raw == 1 {
			return "paused"
		}
		return "running"
	})
	binding := d.Binding
	if binding == "" {
		binding = "-"
	}
	return fmt.Sprintf("%5.0fs  %-25s  %-11s  %-2s  %-4s  %-4s  %-4s  %-18s  %-7s  | %-9s  %6.1f  %s",
		elapsed.Seconds(), scene, load, io, lock, free, used, lag, paused, d.Mode, d.Budget, binding)
}

// shortErr is a table cell for a failed sample.
func shortErr(err error) string {
	switch {
	case errors.Is(err, signals.ErrReplicaMissing):
		return "MISSING"
	case errors.Is(err, signals.ErrTimeout):
		return "TIMEOUT"
	case errors.Is(err, signals.ErrUnreachable), errors.Is(err, signals.ErrNotConnected):
		return "DOWN"
	}
	return "ERROR"
}

func formatBytes(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.0f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// sceneStats summarises what the signals read during one scene.
type sceneStats struct {
	name                     string
	rows                     int
	maxLoad, maxRaw, maxLock float64
	minFree                  float64
	maxLag                   float64
	modes                    map[throttle.Mode]int
	errors                   map[string]error // signal key -> first error seen
}

func (st *sceneStats) add(snap signals.Snapshot, d throttle.Decision) {
	if st.rows == 0 {
		st.minFree = -1
		st.errors = map[string]error{}
		st.modes = map[throttle.Mode]int{}
	}
	st.rows++
	st.modes[d.Mode]++
	for _, s := range snap.Samples {
		if s.Err != nil {
			if _, ok := st.errors[s.Key()]; !ok {
				st.errors[s.Key()] = s.Err
			}
			continue
		}
		switch s.Name {
		case signals.PrimaryLoad:
			st.maxLoad, st.maxRaw = max(st.maxLoad, s.Value), max(st.maxRaw, s.Raw)
		case signals.PrimaryLockWait:
			st.maxLock = max(st.maxLock, s.Raw)
		case signals.ConnectionHeadroom:
			if st.minFree < 0 || s.Raw < st.minFree {
				st.minFree = s.Raw
			}
		case signals.ReplicaLagBytes:
			st.maxLag = max(st.maxLag, s.Raw)
		}
	}
}

func writeSummary(w io.Writer, stats []sceneStats) {
	fmt.Fprintln(w, "\nSummary (per scene: the highest load and lag, the lowest headroom, and what could not be read):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENE\tMAX LOAD\tMAX RAW\tMAX LOCK WAIT\tMIN FREE CONNS\tMAX REPLICA LAG\tMODES (seconds)\tUNREADABLE")
	var messages []string
	for _, st := range stats {
		if st.rows == 0 {
			continue
		}
		var bad []string
		for _, k := range slices.Sorted(maps.Keys(st.errors)) {
			bad = append(bad, k+" "+shortErr(st.errors[k]))
			messages = append(messages, st.errors[k].Error())
		}
		unreadable := "-"
		if len(bad) > 0 {
			unreadable = strings.Join(bad, ", ")
		}
		var modes []string
		for _, m := range []throttle.Mode{throttle.ModeRunning, throttle.ModeThrottled, throttle.ModePaused, throttle.ModeCritical, throttle.ModeStale} {
			if n := st.modes[m]; n > 0 {
				modes = append(modes, fmt.Sprintf("%s %d", m, n))
			}
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.0f\t%.0f\t%s\t%s\t%s\n", st.name, st.maxLoad, st.maxRaw, st.maxLock, st.minFree, formatBytes(st.maxLag), strings.Join(modes, ", "), unreadable)
	}
	tw.Flush()
	if len(messages) > 0 {
		slices.Sort(messages)
		fmt.Fprintln(w, "\nWhy (each unreadable signal is unsafe, never read as zero):")
		for _, m := range slices.Compact(messages) {
			fmt.Fprintln(w, "  -", m)
		}
	}
}
