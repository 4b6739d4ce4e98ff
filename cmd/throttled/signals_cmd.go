package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/wait"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// signalsOptions are the parsed flags of `throttled signals`.
type signalsOptions struct {
	cfg      signals.Config
	interval time.Duration // printing interval with --watch
	watch    bool
	json     bool
	custom   []string
	config   string
	log      logFlags
	// customs says where each custom signal was defined (a file:line, or
	// its --custom flag) and its rule's target, if it has one.
	customs map[signals.Name]customInfo
}

// customInfo is what `throttled signals` says of a custom signal beside
// its reading.
type customInfo struct {
	source string
	target *float64
	// maxAge is its rule's max_age in --config's file; 0 without one.
	maxAge time.Duration
}

// stale is the controller's judgment of s's age (throttle.Unfresh): by
// its rule's max_age where --config gives one, else by --max-age.
func stale(snap signals.Snapshot, customs map[signals.Name]customInfo, s signals.Sample) bool {
	maxAge := snap.MaxAge
	if c, ok := customs[s.Name]; ok && c.maxAge > 0 {
		maxAge = c.maxAge
	}
	return throttle.Unfresh(snap.At, s, maxAge) != ""
}

func (o *signalsOptions) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.cfg.PrimaryDSN, "primary-dsn", "", "primary connection URL, as a role with pg_monitor")
	withEnv(fs, "primary-dsn", "THROTTLED_PRIMARY_DSN")
	fs.StringArrayVar(&o.cfg.ReplicaDSNs, "replica-dsn", nil, "replica connection URL, for replica-side signals (repeatable)")
	fs.StringArrayVar(&o.cfg.Replicas, "replica", nil, "replica name (slot or application_name) that must be present (repeatable)")
	fs.Float64Var(&o.cfg.Cores, "cores", 0, "the primary's CPU cores, which load is a share of (required; no SQL reveals it)")
	withEnv(fs, "cores", "THROTTLED_CORES")
	fs.DurationVar(&o.interval, "interval", time.Second, "with --watch, how often to print; sampling runs every 250ms or this, if shorter")
	fs.DurationVar(&o.cfg.Timeout, "timeout", signals.DefaultTimeout, "bound on every query and connection attempt")
	fs.DurationVar(&o.cfg.MaxAge, "max-age", signals.DefaultMaxAge, "age past which a sample is stale")
	fs.DurationVar(&o.cfg.Smoothing, "smoothing", signals.DefaultSmoothing, "EWMA time constant of primary_load and the wait signals")
	fs.BoolVar(&o.cfg.AllowSuperuser, "allow-superuser", false, "allow sampling as a superuser (not recommended)")
	fs.BoolVar(&o.cfg.ForegroundLatency, "foreground-latency", false, "also time a canary commit on throttled.canary (needs 'throttled migrate'): foreground_latency and foreground_latency_seconds")
	fs.BoolVar(&o.watch, "watch", false, "keep printing until interrupted")
	fs.BoolVar(&o.json, "json", false, "print one JSON object per snapshot, one per line")
	fs.StringVar(&o.cfg.PgBouncerDSN, "pgbouncer-dsn", "", "PgBouncer's admin console (dbname=pgbouncer), as a role in its stats_users: the pool signals")
	withEnv(fs, "pgbouncer-dsn", "THROTTLED_PGBOUNCER_DSN")
	fs.StringVar(&o.config, "config", "", "a sidecar's configuration file: its primary's dsn and cores, its replicas and its PgBouncer, for the flags not given; and its custom and Prometheus signals, read every second, with their rules' targets")
	withEnv(fs, "config", "THROTTLED_CONFIG")
	fs.StringArrayVar(&o.custom, "custom", nil, "a custom signal to read too, as NAME=QUERY: one row of one number, run READ ONLY every second (repeatable)")
}

// newSignalsCmd is `throttled signals`, parsing into o.
func newSignalsCmd(lf *logFlags, o *signalsOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "signals",
		Short: "sample the primary's and replicas' health once, or --watch",
		Long: `Samples the primary's and the replicas' health and prints every signal, its value, age and unit, or why
it is unsafe. Without --watch it reads twice, 2 s apart (the WAL rate is measured over a window), and
prints the second reading. Run it as a role granted pg_monitor, not a superuser.`,
		Example: `  throttled signals --cores 8
  throttled signals --cores 8 --json
  throttled signals --cores 8 --watch --custom 'queue_depth=SELECT count(*) FROM jobs_queue'`,
		Args: cobra.NoArgs,
		Annotations: map[string]string{annotationExit: "Exit codes: 0 every signal was read, 1 runtime failure (a server unreachable, a missing grant, " +
			"a DSN to the wrong kind of server), 2 usage, 3 a signal failed or is stale."},
		RunE: action(func(cmd *cobra.Command) int {
			if err := o.check(cmd.Flags(), os.Getenv); err != nil {
				return fail(cmd.ErrOrStderr(), "signals", err)
			}
			o.log = *lf
			return runSignals(cmd.Context(), *o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		}),
	}
	cmd.Flags().SortFlags = false
	o.register(cmd.Flags())
	return cmd
}

// check reads the environment behind the flags not given and validates.
func (o *signalsOptions) check(fs *pflag.FlagSet, getenv func(string) string) error {
	var errs []error
	if _, err := applyEnv(fs, getenv); err != nil {
		errs = append(errs, err)
	}
	for _, c := range o.custom {
		name, query, ok := strings.Cut(c, "=")
		cs := signals.CustomSignal{Name: signals.Name(strings.TrimSpace(name)), Query: query, Every: time.Second, Source: "--custom " + strings.TrimSpace(name)}
		if !ok {
			errs = append(errs, fmt.Errorf("--custom %q: want NAME=QUERY", c))
			continue
		}
		if ps := cs.Problems(); len(ps) > 0 {
			errs = append(errs, fmt.Errorf("--custom %s: %s", name, strings.Join(ps, "; ")))
			continue
		}
		o.cfg.Custom = append(o.cfg.Custom, cs)
	}
	o.customs = map[signals.Name]customInfo{}
	for _, cs := range o.cfg.Custom {
		o.customs[cs.Name] = customInfo{source: cs.Source}
	}
	if o.config != "" {
		sc, err := samplerFromConfig(o.config)
		if err != nil {
			return err
		}
		if err := sc.fill(o.config, &o.cfg.PrimaryDSN, &o.cfg.Cores, &o.cfg.ReplicaDSNs, &o.cfg.Replicas, &o.cfg.PgBouncerDSN); err != nil {
			return err
		}
		if err := o.customFromConfig(); err != nil {
			return err
		}
	}
	if o.cfg.PrimaryDSN == "" {
		errs = append(errs, errors.New("--primary-dsn (or THROTTLED_PRIMARY_DSN, or --config) is required"))
	}
	if !(o.cfg.Cores > 0) || math.IsInf(o.cfg.Cores, 0) {
		errs = append(errs, fmt.Errorf("--cores must be a positive number of CPU cores, got %v", o.cfg.Cores))
	}
	if o.interval <= 0 {
		errs = append(errs, fmt.Errorf("--interval must be positive, got %s", o.interval))
	}
	if o.cfg.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout must be positive, got %s", o.cfg.Timeout))
	}
	if o.cfg.MaxAge <= 0 {
		errs = append(errs, fmt.Errorf("--max-age must be positive, got %s", o.cfg.MaxAge))
	}
	if o.cfg.Smoothing < 0 {
		errs = append(errs, fmt.Errorf("--smoothing must not be negative, got %s", o.cfg.Smoothing))
	}
	if len(errs) > 0 {
		return usageError(errors.Join(errs...))
	}
	o.cfg.Interval = min(signals.DefaultInterval, o.interval)
	if o.cfg.Interval >= o.cfg.MaxAge {
		return usageError(fmt.Errorf("the sampling interval %s must be shorter than --max-age %s", o.cfg.Interval, o.cfg.MaxAge))
	}
	return nil
}

// customFromConfig adds the configuration file's custom signals, each
// with its file:line and its rule's target, but for one a --custom flag
// names too: the flag's wins. Each is read every second at most, as a
// --custom one is, so a reading is never stale between two prints; its
// timeout is the file's.
func (o *signalsOptions) customFromConfig() error {
	cfg, err := config.LoadWithoutSecrets(o.config)
	if err != nil {
		return err
	}
	for _, cs := range cfg.Custom {
		if _, flagged := o.customs[cs.Name]; flagged {
			continue
		}
		cs.Every = min(cmp.Or(cs.Every, signals.DefaultCustomEvery), time.Second)
		o.cfg.Custom = append(o.cfg.Custom, cs)
		info := customInfo{source: cs.Source}
		if r, ok := cfg.JobRules[cs.Name]; ok {
			info.target, info.maxAge = &r.Target, r.MaxAge
		} else if r, ok := cfg.Rules[cs.Name]; ok {
			info.target, info.maxAge = &r.Target, r.MaxAge
		}
		o.customs[cs.Name] = info
	}
	// The Prometheus signals, read as the sidecar reads them; their
	// credentials must be set (a linter's run leaves them unset).
	p := cfg.Prometheus.PrometheusConfig
	for _, secret := range []string{p.BearerToken, p.BasicPassword} {
		if what, unset := config.Unset(secret); unset {
			return fmt.Errorf("%s: prometheus: a credential is not set (%s): set it to read the prometheus signals", o.config, what)
		}
	}
	o.cfg.Prometheus = p
	for _, ps := range p.Signals {
		info := customInfo{source: ps.Source}
		if r, ok := cfg.Rules[ps.Name]; ok {
			info.target, info.maxAge = &r.Target, r.MaxAge
		}
		o.customs[ps.Name] = info
	}
	return nil
}

func runSignals(ctx context.Context, o signalsOptions, out, errOut io.Writer) int {
	log, err := o.log.logger(errOut)
	if err != nil {
		return fail(errOut, "signals", err)
	}
	dsnErrs := []error{checkDSN("--primary-dsn", o.cfg.PrimaryDSN), checkDSN("--pgbouncer-dsn", o.cfg.PgBouncerDSN)}
	for _, dsn := range o.cfg.ReplicaDSNs {
		dsnErrs = append(dsnErrs, checkDSN("--replica-dsn", dsn))
	}
	if err := errors.Join(dsnErrs...); err != nil {
		return fail(errOut, "signals", usageError(err))
	}
	o.cfg.Logger = log.Named("signals")
	p, err := signals.New(o.cfg)
	if err != nil {
		return fail(errOut, "signals", usageError(err))
	}
	defer p.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*o.cfg.Timeout+time.Second)
	err = p.Connect(cctx)
	cancel()
	if err != nil {
		return fail(errOut, "signals", err)
	}
	print := func(snap signals.Snapshot) error {
		if o.json {
			return writeJSON(out, snap, o.customs)
		}
		return writeTable(out, snap, o.customs)
	}
	if !o.watch {
		// Two readings a window apart: a rate (the WAL's) needs both.
		p.Tick(ctx)
		if err := wait.For(ctx, signals.WALRateWindow); err != nil {
			return fail(errOut, "signals", err)
		}
		p.Tick(ctx)
		snap := p.Snapshot()
		if err := print(snap); err != nil {
			return fail(errOut, "signals", err)
		}
		if unsafe(snap, o.customs) {
			return exitUnsafe
		}
		return exitOK
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = p.Run(rctx) })
	defer func() { stop(); wg.Wait() }()
	t := time.NewTicker(o.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return exitOK
		case <-t.C:
			if !o.json {
				fmt.Fprintln(out)
			}
			if err := print(p.Snapshot()); err != nil {
				return fail(errOut, "signals", err)
			}
		}
	}
}

// checkDSN reports a connection string that does not parse, naming its
// flag; pgconn's error hides the password. An empty one is not checked.
func checkDSN(flag, dsn string) error {
	if dsn == "" {
		return nil
	}
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	return nil
}

// unsafe reports whether any sample failed or is stale.
func unsafe(snap signals.Snapshot, customs map[signals.Name]customInfo) bool {
	return slices.ContainsFunc(snap.Samples, func(s signals.Sample) bool { return s.Err != nil || stale(snap, customs, s) })
}

// jsonSample is one signal in `throttled signals --json`.
type jsonSample struct {
	Name       signals.Name      `json:"name"`
	Labels     map[string]string `json:"labels"`
	Value      *float64          `json:"value"` // null when the reading failed
	Raw        *float64          `json:"raw"`
	Unit       signals.Unit      `json:"unit"`
	At         time.Time         `json:"at"`
	AgeSeconds float64           `json:"age_seconds"`
	Stale      bool              `json:"stale"`
	Error      *string           `json:"error"`
	// Source and Target are a custom signal's: where it was defined (a
	// file:line, or its --custom flag) and its rule's target, if any.
	Source string   `json:"source,omitempty"`
	Target *float64 `json:"target,omitempty"`
}

type jsonSnapshot struct {
	At      time.Time    `json:"at"`
	Signals []jsonSample `json:"signals"`
}

func toJSON(snap signals.Snapshot, customs map[signals.Name]customInfo) jsonSnapshot {
	js := jsonSnapshot{At: snap.At.UTC(), Signals: []jsonSample{}}
	for _, s := range snap.Samples {
		j := jsonSample{
			Name: s.Name, Labels: s.Labels, Unit: s.Unit, At: s.At.UTC(),
			AgeSeconds: s.Age(snap.At).Seconds(), Stale: stale(snap, customs, s),
		}
		if j.Labels == nil {
			j.Labels = map[string]string{}
		}
		if s.Err != nil {
			msg := s.Err.Error()
			j.Error = &msg
		} else {
			j.Value, j.Raw = &s.Value, &s.Raw
		}
		if c, ok := customs[s.Name]; ok {
			j.Source, j.Target = c.source, c.target
		}
		js.Signals = append(js.Signals, j)
	}
	return js
}

func writeJSON(w io.Writer, snap signals.Snapshot, customs map[signals.Name]customInfo) error {
	return json.NewEncoder(w).Encode(toJSON(snap, customs))
}

// writeTable prints every sample, then, when there are custom signals,
// where each was defined and its rule's target ("-" for one that only
// informs).
func writeTable(w io.Writer, snap signals.Snapshot, customs map[signals.Name]customInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "SIGNAL\tLABELS\tVALUE\tRAW\tUNIT\tAGE\tSTATUS\n")
	for _, s := range snap.Samples {
		labels := "-"
		if len(s.Labels) > 0 {
			var kv []string
			for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
				kv = append(kv, k+"="+s.Labels[k])
			}
			labels = strings.Join(kv, ",")
		}
		value, raw, status := formatValue(s.Value), formatValue(s.Raw), "ok"
		switch {
		case s.Err != nil:
			value, raw, status = "-", "-", "error: "+s.Err.Error()
		case stale(snap, customs, s):
			status = "stale"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, labels, value, raw, s.Unit,
			s.Age(snap.At).Round(time.Millisecond), status)
	}
	if err := tw.Flush(); err != nil || len(customs) == 0 {
		return err
	}
	fmt.Fprintf(tw, "\nCUSTOM SIGNAL\tDEFINED AT\tTARGET\n")
	for _, name := range slices.Sorted(maps.Keys(customs)) {
		target := "-"
		if t := customs[name].target; t != nil {
			target = formatValue(*t)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, customs[name].source, target)
	}
	return tw.Flush()
}

func formatValue(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.3f", v)
}
