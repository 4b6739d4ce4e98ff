package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/user"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/textsafe"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/throttle"
)

// coordFlags are the flags every command on the cluster's holds and
// state takes: where to act (the database or a sidecar's API), as whom,
// how long to wait, and --json.
type coordFlags struct {
	dsn     string
	config  string // a sidecar's configuration file, for its coordination_dsn
	addr    string // a sidecar's API instead of the database
	token   string
	actor   string
	json    bool
	timeout time.Duration
}

func (c *coordFlags) register(fs *pflag.FlagSet, withActor bool, jsonHelp string) {
	fs.StringVar(&c.dsn, "primary-dsn", "", "the primary, as a role that may write schema throttled")
	withEnv(fs, "primary-dsn", "THROTTLED_PRIMARY_DSN")
	fs.StringVar(&c.addr, "addr", "", "a sidecar's URL, such as http://127.0.0.1:18087, to act through instead of the database (token in $THROTTLED_TOKEN; a --primary-dsn given beats this variable)")
	withEnv(fs, "addr", "THROTTLED_ADDR")
	fs.StringVar(&c.config, "config", "", "a sidecar's configuration file: act on its primary (coordination_dsn) when neither --primary-dsn nor --addr is given")
	withEnv(fs, "config", "THROTTLED_CONFIG")
	if withActor {
		fs.StringVar(&c.actor, "actor", "", "who is acting (default: the OS user; through --addr, the token's name)")
	}
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on the call: connecting and every query, or the sidecar's answer")
	fs.BoolVar(&c.json, "json", false, jsonHelp)
}

// resolve reads the environment behind the flags not given (and the
// token), and checks that there is somewhere to act.
func (c *coordFlags) resolve(fs *pflag.FlagSet, getenv func(string) string) error {
	given, err := applyEnv(fs, getenv)
	if err != nil {
		return err
	}
	// A flag beats a variable: --primary-dsn on the command line acts on
	// the database even where $THROTTLED_ADDR names a sidecar.
	if given["primary-dsn"] && !given["addr"] {
		c.addr = ""
	}
	if c.timeout <= 0 {
		return usageError(fmt.Errorf("--timeout must be positive, got %s", c.timeout))
	}
	if c.addr != "" {
		if c.token = getenv("THROTTLED_TOKEN"); c.token == "" {
			return usageError(errors.New("--addr needs a token in THROTTLED_TOKEN"))
		}
		return nil
	}
	if c.dsn == "" && c.config != "" {
		dsn, err := configDSN(c.config)
		if err != nil {
			return err
		}
		c.dsn = dsn
	}
	if c.dsn == "" {
		return usageError(errors.New("--primary-dsn (or THROTTLED_PRIMARY_DSN), --addr (or THROTTLED_ADDR), or --config (or THROTTLED_CONFIG) is required"))
	}
	if err := checkDSN("--primary-dsn", c.dsn); err != nil {
		return usageError(err)
	}
	if c.actor == "" {
		c.actor = getenv("USER")
		if u, err := user.Current(); err == nil && u.Username != "" {
			c.actor = u.Username
		}
	}
	return nil
}

// configDSN is the coordination DSN of the configuration file at path,
// read as check-config reads it offline: only that secret must be there.
func configDSN(path string) (string, error) {
	cfg, err := config.LoadWithoutSecrets(path)
	if err != nil {
		return "", err
	}
	if what, unset := config.Unset(cfg.CoordinationDSN); unset {
		return "", usageError(fmt.Errorf("--config %s: the primary's coordination_dsn (or dsn) is %s, which is not set", path, what))
	}
	return cfg.CoordinationDSN, nil
}

// samplerConfig is what signals and exec take from a sidecar's
// configuration file for the flags not given: the primary's DSN and
// cores, and the replicas (required ones, and those sampled directly).
type samplerConfig struct {
	primaryDSN       string
	cores            float64
	replicaDSNs      []string
	requiredReplicas []string
}

func samplerFromConfig(path string) (samplerConfig, error) {
	cfg, err := config.LoadWithoutSecrets(path)
	if err != nil {
		return samplerConfig{}, err
	}
	if what, unset := config.Unset(cfg.PrimaryDSN); unset {
		return samplerConfig{}, usageError(fmt.Errorf("--config %s: the primary's dsn is %s, which is not set", path, what))
	}
	sc := samplerConfig{primaryDSN: cfg.PrimaryDSN, cores: cfg.Cores}
	for _, name := range slices.Sorted(maps.Keys(cfg.ReplicaDSNs)) {
		dsn := cfg.ReplicaDSNs[name]
		if what, unset := config.Unset(dsn); unset {
			return samplerConfig{}, usageError(fmt.Errorf("--config %s: replica %q's dsn is %s, which is not set", path, name, what))
		}
		sc.replicaDSNs = append(sc.replicaDSNs, dsn)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Replicas)) {
		if cfg.Replicas[name] == throttle.ReplicaRequired {
			sc.requiredReplicas = append(sc.requiredReplicas, name)
		}
	}
	return sc, nil
}

// fill sets what the flags left empty from sc.
func (sc samplerConfig) fill(dsn *string, cores *float64, replicaDSNs, replicas *[]string) {
	*dsn = firstNonEmpty(*dsn, sc.primaryDSN)
	if *cores == 0 {
		*cores = sc.cores
	}
	if len(*replicaDSNs) == 0 {
		*replicaDSNs = sc.replicaDSNs
	}
	if len(*replicas) == 0 {
		*replicas = sc.requiredReplicas
	}
}

// coordCmd builds one of the commands on the cluster's holds and state:
// its flags, its text, and a body that gets the resolved flags.
func coordCmd(lf *logFlags, c *cobra.Command, cf *coordFlags, withActor bool, jsonHelp string,
	body func(ctx context.Context, cmd *cobra.Command, out, errOut io.Writer) int) *cobra.Command {
	c.Args = cobra.NoArgs
	c.Annotations = map[string]string{annotationEnv: holdsEnv,
		annotationExit: "Exit codes: 0 ok, 1 runtime failure (the database or the sidecar unreachable or refusing), 2 usage (a hold past the cluster's cap included)."}
	c.RunE = action(func(cmd *cobra.Command) int {
		name := commandName(cmd)
		if err := cf.resolve(cmd.Flags(), os.Getenv); err != nil {
			return fail(cmd.ErrOrStderr(), name, err)
		}
		// Logs (pgx's, the sidecar client's) go to standard error, as
		// every command's; the level is checked like theirs.
		if _, err := lf.logger(cmd.ErrOrStderr()); err != nil {
			return fail(cmd.ErrOrStderr(), name, err)
		}
		return body(cmd.Context(), cmd, cmd.OutOrStdout(), cmd.ErrOrStderr())
	})
	c.Flags().SortFlags = false
	cf.register(c.Flags(), withActor, jsonHelp)
	return c
}

// commandName is cmd's name below the root, as errors name it.
func commandName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// openStore connects and migrates, bounded by ctx.
func openStore(ctx context.Context, dsn string, cfg holds.Config) (*holds.Store, *pgxpool.Pool, error) {
	return connectStore(ctx, dsn, cfg, holds.NewStore)
}

// openReadStore connects to read only: no migration, so a role that may
// only read schema throttled (pg_monitor) will do.
func openReadStore(ctx context.Context, dsn string, cfg holds.Config) (*holds.Store, *pgxpool.Pool, error) {
	return connectStore(ctx, dsn, cfg, holds.OpenStore)
}

func connectStore(ctx context.Context, dsn string, cfg holds.Config,
	open func(context.Context, *pgxpool.Pool, holds.Config) (*holds.Store, error)) (*holds.Store, *pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, nil, usageError(fmt.Errorf("--primary-dsn: %w", err))
	}
	pcfg.MaxConns = 2
	pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pcfg.ConnConfig.RuntimeParams["application_name"] = "throttled-cli"
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, nil, err
	}
	store, err := open(ctx, pool, cfg)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return store, pool, nil
}

// scopeFlags selects a scope: --job, --prefix or --all, exactly one.
type scopeFlags struct {
	job, prefix string
	all         bool
}

func (s *scopeFlags) register(fs *pflag.FlagSet, verb string) {
	fs.StringVar(&s.job, "job", "", verb+" one job")
	fs.StringVar(&s.prefix, "prefix", "", verb+" every job whose name starts with this")
	fs.BoolVar(&s.all, "all", false, verb+" every job")
}

func (s *scopeFlags) scope() (throttle.Scope, error) {
	n := 0
	var sc throttle.Scope
	if s.job != "" {
		n, sc = n+1, throttle.OneJob(throttle.Job(s.job))
	}
	if s.prefix != "" {
		n, sc = n+1, throttle.Group(s.prefix)
	}
	if s.all {
		n, sc = n+1, throttle.AllJobs()
	}
	if n != 1 {
		return sc, errors.New("give exactly one of --job, --prefix and --all")
	}
	if err := sc.Validate(); err != nil {
		return sc, err
	}
	return sc, nil
}

// newPlaceHoldCmd is pause (a hold that stops its jobs), throttle (one
// that scales them, --ratio) and exempt (one that lets them ignore a
// signal, --signal): the same flags, the same checks, one audit line.
func newPlaceHoldCmd(lf *logFlags, name string) *cobra.Command {
	var cf coordFlags
	var sf scopeFlags
	var ttl time.Duration
	var reason, signal string
	var ratio float64
	c := &cobra.Command{
		Use:   name + " (--job NAME | --prefix PREFIX | --all) --reason WHY [flags]",
		Short: "hold one job, a group or all jobs, in every process, until it expires or is released",
		Long: `Places a hold: the jobs in its scope stop, in every process, including ones started later, until it
expires or is released (throttled resume). Every hold expires; its TTL is at most the cluster's cap
(holds.max_ttl of throttled run), and without --ttl the cluster's default (holds.default_ttl). Audited.`,
		Example: `  throttled pause --job purge_sessions --ttl 30m --reason "replica rebuild"
  throttled pause --addr http://127.0.0.1:18087 --all --reason "incident 4211" --json`,
	}
	if name == "throttle" {
		c.Short = "a live override: run one job, a group or all jobs at a share of their rate (--ratio 0.3) until it expires or is released"
		c.Long = `Places a live override: a hold that runs the jobs in its scope at --ratio of their rate instead of
stopping them, until it expires or is released (throttled resume). Audited; a running exec follows it
at its next heartbeat.`
		c.Example = `  throttled throttle --job purge_sessions --ratio 0.3 --ttl 2h --reason "deploy"`
		c.Use = name + " (--job NAME | --prefix PREFIX | --all) --ratio R --reason WHY [flags]"
	}
	if name == "exempt" {
		c.Short = "exempt one job, a group or all jobs from one signal until it expires or is released; pages if they run while critical"
		c.Long = `Places an exemption: a hold that lets the jobs in its scope ignore one signal (a rule's name, such as
replica_lag_seconds) until it expires or is released (throttled resume). A job rule on that signal no
longer gates them, and a critical or stale pause that only that signal causes lets them go on at the
rate they had, without growing; running while critical pages (ThrottledExemptWhileCritical). Every
other signal still binds them. Audited; a running exec follows it at its next heartbeat.`
		c.Example = `  throttled exempt --job purge_sessions --signal replica_lag_seconds --ttl 1h --reason "replica1 is being rebuilt"`
		c.Use = name + " (--job NAME | --prefix PREFIX | --all) --signal NAME --reason WHY [flags]"
	}
	coordCmd(lf, c, &cf, true, "print the hold placed as one JSON object, as GET /v1/holds lists it",
		func(ctx context.Context, cmd *cobra.Command, out, errOut io.Writer) int {
			sc, err := sf.scope()
			var errs []error
			if err != nil {
				errs = append(errs, err)
			}
			if strings.TrimSpace(reason) == "" {
				errs = append(errs, errors.New("--reason is required"))
			}
			// Without --ttl the request carries none, and the cluster's
			// default applies (holds.default_ttl of throttled run), as
			// the cluster's cap does: one policy, throttle.TTLPolicy.
			switch {
			case !cmd.Flags().Changed("ttl"):
			case ttl <= 0:
				errs = append(errs, fmt.Errorf("--ttl must be positive, got %s", ttl))
			case ttl < throttle.MinHoldTTL:
				errs = append(errs, fmt.Errorf("--ttl %s is under the shortest hold, %s", ttl, throttle.MinHoldTTL))
			}
			if name == "throttle" && !(ratio >= throttle.MinHoldRatio && ratio <= 1) {
				errs = append(errs, fmt.Errorf("--ratio must be from %v (a thousandth of the jobs' rate) to 1, got %v (to stop the jobs, throttled pause)", throttle.MinHoldRatio, ratio))
			}
			// One printable line each: a newline or an escape in either
			// would forge a row of throttled holds and of the audit log.
			for _, f := range []struct{ flag, v string }{{"--reason", reason}, {"--actor", cf.actor}} {
				if err := throttle.Storable(f.v); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", f.flag, err))
				}
			}
			if name == "exempt" && signal == "" {
				errs = append(errs, errors.New("--signal is required: the signal the jobs may ignore, such as replica_lag_seconds"))
			}
			if len(errs) > 0 {
				return fail(errOut, name, usageError(errors.Join(errs...)))
			}
			ctx, cancel := context.WithTimeout(ctx, cf.timeout)
			defer cancel()
			b, err := cf.backend(ctx, true)
			if err != nil {
				return fail(errOut, name, err)
			}
			defer b.close()
			h, warnings, err := b.add(ctx, throttle.HoldRequest{Scope: sc, TTL: ttl, Reason: reason, Ratio: ratio, Exempt: signal})
			if errors.Is(err, throttle.ErrInvalidHold) {
				return fail(errOut, name, usageError(err))
			}
			if err != nil {
				return fail(errOut, name, err)
			}
			for _, w := range warnings {
				fmt.Fprintf(errOut, "throttled %s: warning: %s\n", name, textsafe.Line(w))
			}
			if cf.json {
				_ = json.NewEncoder(out).Encode(sidecar.HoldJSON(h))
				return exitOK
			}
			what := ""
			switch {
			case h.Exempt != "":
				what = " exempt from " + h.Exempt
			case !h.Pauses():
				what = fmt.Sprintf(" at %.0f%%", 100*h.Ratio)
			}
			fmt.Fprintf(out, "hold %s on %s%s by %s until %s: %s\n", h.ID, textsafe.Line(h.Scope.String()), what, textsafe.Line(h.Actor),
				h.Expires.UTC().Format(time.RFC3339), textsafe.Line(h.Reason))
			return exitOK
		})
	fs := c.Flags()
	sf.register(fs, name)
	fs.DurationVar(&ttl, "ttl", 0, "how long the hold lasts, at most the cluster's cap (holds.max_ttl of throttled run, 24h by default); every hold expires. Unset: the cluster's default (holds.default_ttl of throttled run, 1h by default)")
	fs.StringVar(&reason, "reason", "", "why (required; shown to everyone and audited)")
	if name == "throttle" {
		fs.Float64Var(&ratio, "ratio", 0, "the share of their rate the jobs run at, above 0 and at most 1, such as 0.3 (required; throttled pause stops them)")
	}
	if name == "exempt" {
		fs.StringVar(&signal, "signal", "", "the signal the jobs ignore: a rule's name, such as replica_lag_seconds or vacuum_running (required)")
	}
	return c
}

// setHoldCap writes cfg's holds block (default_ttl, max_ttl) as the
// cluster's hold policy: the database enforces the cap for every client,
// and a hold placed without a TTL (the CLI without --ttl) lives the
// default. `throttled run` calls it at start and on each applied reload,
// so the sidecar's file is the authority. Bounded by 5 s.
func setHoldCap(ctx context.Context, store *holds.Store, cfg *config.Config, path string, log hclog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	old, err := store.SetTTL(ctx, cfg.HoldTTL, "throttled", throttle.SourceAuto,
		fmt.Sprintf("holds of %s (version %s)", path, cfg.Version))
	if err != nil {
		return fmt.Errorf("%s: holds default_ttl %s, max_ttl %s: %w", path, cfg.HoldTTL.Default, cfg.HoldTTL.Max, err)
	}
	if old != cfg.HoldTTL {
		log.Info("cluster hold TTLs set", "default_ttl", cfg.HoldTTL.Default, "max_ttl", cfg.HoldTTL.Max,
			"previous_default_ttl", old.Default, "previous_max_ttl", old.Max, "file", path)
	}
	// The windows live in the cluster too, so every process applies them,
	// including while this one is down.
	if err := store.SetWindows(ctx, cfg.Windows, "throttled", throttle.SourceAuto,
		fmt.Sprintf("windows of %s (version %s)", path, cfg.Version)); err != nil {
		return fmt.Errorf("%s: windows: %w", path, err)
	}
	return nil
}

// console is where `resume --all` asks for its confirmation: the
// process's stdin, and whether it is a terminal.
type console struct {
	in       io.Reader
	terminal bool
}

// resumeOptions are the flags of `throttled resume`.
type resumeOptions struct {
	cf                             coordFlags
	id, job, prefix, scope, reason string
	every, yes, latched            bool
}

func (o *resumeOptions) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.id, "hold", "", "release the hold with this `ID` (from throttled holds)")
	fs.StringVar(&o.job, "job", "", "release the holds on exactly this job (scope job:NAME)")
	fs.StringVar(&o.prefix, "prefix", "", "release the holds on exactly this group (scope group:PREFIX)")
	fs.StringVar(&o.scope, "scope", "", "release the holds with exactly this scope: all, job:NAME or group:PREFIX")
	fs.BoolVar(&o.every, "all", false, "release every active hold of every scope, after a confirmation listing them")
	fs.BoolVar(&o.yes, "yes", false, "with --all: release without asking (required when stdin is not a terminal)")
	fs.BoolVar(&o.latched, "latched", false, "end the cluster's latched critical pause (the leader acts within a tick)")
	fs.StringVar(&o.reason, "reason", "", "why (audited)")
}

const resumeUsage = `Releases holds; jobs restart slowly. Exactly one of:
  --hold ID        that one hold (an ID from throttled holds)
  --job NAME       the holds on exactly job:NAME
  --prefix PREFIX  the holds on exactly group:PREFIX
  --scope SCOPE    the holds with exactly this scope: all, job:NAME or group:PREFIX
                   (--scope all releases the hold on all jobs alone)
  --all            every active hold of every scope, after a confirmation listing them;
                   --yes skips it, and is required when stdin is not a terminal
  --latched        end the cluster's latched critical pause instead`

func newResumeCmd(lf *logFlags) *cobra.Command {
	var o resumeOptions
	c := &cobra.Command{
		Use:   "resume (--hold ID | --job NAME | --prefix PREFIX | --scope SCOPE | --all [--yes] | --latched) [flags]",
		Short: "release holds (jobs restart slowly)",
		Long:  resumeUsage,
		Example: `  throttled resume --job purge_sessions
  throttled resume --latched --reason "load gone, checked"`,
	}
	coordCmd(lf, c, &o.cf, true, "print the holds released as a JSON array",
		func(ctx context.Context, cmd *cobra.Command, out, errOut io.Writer) int {
			return o.run(ctx, console{in: cmd.InOrStdin(), terminal: isatty.IsTerminal(os.Stdin.Fd()) && cmd.InOrStdin() == os.Stdin}, out, errOut)
		})
	o.register(c.Flags())
	return c
}

// resume parses args as resume's flags and runs it, asking on con: the
// tests' way in, with a console of their own.
func resume(ctx context.Context, args []string, con console, out, errOut io.Writer) int {
	var o resumeOptions
	fs := newFlagSet("resume", errOut, nil)
	o.cf.register(fs, true, "")
	o.register(fs)
	if err := parseArgs(fs, args); err != nil {
		return fail(errOut, "resume", err)
	}
	if err := o.cf.resolve(fs, os.Getenv); err != nil {
		return fail(errOut, "resume", err)
	}
	return o.run(ctx, con, out, errOut)
}

// run releases what o chose, asking on con before --all.
func (o *resumeOptions) run(ctx context.Context, con console, out, errOut io.Writer) int {
	cf, id, job, prefix, scope, reason, every, yes, latched := o.cf, o.id, o.job, o.prefix, o.scope, o.reason, o.every, o.yes, o.latched
	for _, f := range []struct{ flag, v string }{{"--reason", reason}, {"--actor", cf.actor}} {
		if err := throttle.Storable(f.v); err != nil {
			return fail(errOut, "resume", usageError(fmt.Errorf("%s: %w", f.flag, err)))
		}
	}
	chosen := 0
	for _, set := range []bool{id != "", job != "", prefix != "", scope != "", every} {
		if set {
			chosen++
		}
	}
	if latched {
		if chosen > 0 {
			return fail(errOut, "resume", usageError(errors.New("--latched ends the critical pause; release holds in another call")))
		}
		ctx, cancel := context.WithTimeout(ctx, cf.timeout)
		defer cancel()
		b, err := cf.backend(ctx, true)
		if err != nil {
			return fail(errOut, "resume", err)
		}
		defer b.close()
		if err := b.resumeLatched(ctx, reason); err != nil {
			return fail(errOut, "resume", err)
		}
		if cf.json {
			_ = json.NewEncoder(out).Encode(struct {
				Requested bool `json:"resume_requested"`
			}{true})
			return exitOK
		}
		fmt.Fprintln(out, "resume requested: the leader ends the latch within a tick; jobs restart once the signals are calm, slowly")
		return exitOK
	}
	if chosen != 1 {
		return fail(errOut, "resume", usageError(errors.New("give exactly one of --hold ID, --job, --prefix, --scope and --all (--all: every hold of every scope)")))
	}
	var sc throttle.Scope
	var err error
	switch {
	case job != "":
		sc = throttle.OneJob(throttle.Job(job))
		err = sc.Validate()
	case prefix != "":
		sc = throttle.Group(prefix)
		err = sc.Validate()
	case scope != "":
		sc, err = throttle.ParseScope(scope)
	}
	if err != nil {
		return fail(errOut, "resume", usageError(err))
	}
	if every && !yes && !con.terminal {
		return fail(errOut, "resume", usageError(errors.New("--all releases every active hold of every scope: add --yes to confirm, as stdin is not a terminal to ask on "+
			"(--scope all releases the hold on all jobs alone)")))
	}

	// The timeout bounds the calls, not a person's answer: the releases
	// after a confirmation get their own.
	bctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	r, err := cf.backend(bctx, true)
	if err != nil {
		return fail(errOut, "resume", err)
	}
	defer r.close()
	if id != "" {
		h, err := r.release(bctx, id, reason)
		if err != nil {
			return fail(errOut, "resume", err)
		}
		printReleased(out, []throttle.Hold{h}, cf.json)
		return exitOK
	}
	active, err := r.active(bctx)
	if err != nil {
		return fail(errOut, "resume", err)
	}
	var chosenHolds []throttle.Hold
	for _, h := range active {
		if every || h.Scope == sc {
			chosenHolds = append(chosenHolds, h)
		}
	}
	switch {
	case len(chosenHolds) == 0 && every:
		if cf.json {
			printReleased(out, nil, true)
			return exitOK
		}
		fmt.Fprintln(out, "no active holds")
		return exitOK
	case len(chosenHolds) == 0:
		return fail(errOut, "resume", fmt.Errorf("no active hold on exactly %s; see `throttled holds` (--all releases every hold of every scope)", sc))
	case every && !yes:
		ok, err := confirm(con.in, errOut, chosenHolds)
		if err != nil {
			return fail(errOut, "resume", err)
		}
		if !ok {
			return fail(errOut, "resume", errors.New("not confirmed; nothing released"))
		}
	}
	// Exactly the holds listed (and confirmed): a hold made since is not
	// released, and one that ended meanwhile is passed over.
	rctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	var released []throttle.Hold
	for _, h := range chosenHolds {
		got, err := r.release(rctx, h.ID, reason)
		if errors.Is(err, throttle.ErrUnknownHold) {
			if cf.json {
				fmt.Fprintf(errOut, "hold %s had already ended\n", textsafe.Line(h.ID))
			} else {
				fmt.Fprintf(out, "hold %s had already ended\n", textsafe.Line(h.ID))
			}
			continue
		}
		if err != nil {
			printReleased(out, released, cf.json)
			return fail(errOut, "resume", fmt.Errorf("release hold %s (%d of %d released): %w", h.ID, len(released), len(chosenHolds), err))
		}
		released = append(released, got)
	}
	printReleased(out, released, cf.json)
	return exitOK
}

// confirm lists hs on w and asks whether to release them all; only "y" or
// "yes" confirms.
func confirm(in io.Reader, w io.Writer, hs []throttle.Hold) (bool, error) {
	fmt.Fprintf(w, "%d active holds, of every scope:\n", len(hs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tSCOPE\tSOURCE\tACTOR\tREASON")
	for _, h := range hs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", textsafe.Line(h.ID), textsafe.Line(h.Scope.String()), textsafe.Line(string(h.Source)),
			textsafe.Line(h.Actor), textsafe.Line(h.Reason))
	}
	tw.Flush()
	fmt.Fprintf(w, "Release all %d? [y/N] ", len(hs))
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read the confirmation: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

func printReleased(out io.Writer, hs []throttle.Hold, asJSON bool) {
	if asJSON {
		list := []api.Hold{}
		for _, h := range hs {
			list = append(list, sidecar.HoldJSON(h))
		}
		_ = json.NewEncoder(out).Encode(list)
		return
	}
	for _, h := range hs {
		fmt.Fprintf(out, "released hold %s on %s (made by %s: %s)\n", textsafe.Line(h.ID), textsafe.Line(h.Scope.String()), textsafe.Line(h.Actor), textsafe.Line(h.Reason))
	}
	if len(hs) > 0 {
		fmt.Fprintln(out, "jobs restart slowly: at a quarter of their rate before the pause")
	}
}

func newHoldsCmd(lf *logFlags) *cobra.Command {
	var cf coordFlags
	c := &cobra.Command{
		Use:     "holds",
		Short:   "list the active holds",
		Long:    "Lists the active holds: scope, what each does (pause or a ratio), source, actor, time left and reason.",
		Example: "  throttled holds\n  throttled holds --addr http://127.0.0.1:18087 --json",
	}
	return coordCmd(lf, c, &cf, false, "print a JSON array", func(ctx context.Context, _ *cobra.Command, out, errOut io.Writer) int {
		ctx, cancel := context.WithTimeout(ctx, cf.timeout)
		defer cancel()
		b, err := cf.backend(ctx, false)
		if err != nil {
			return fail(errOut, "holds", err)
		}
		defer b.close()
		active, err := b.active(ctx)
		if err != nil {
			return fail(errOut, "holds", err)
		}
		if cf.json {
			list := []api.Hold{}
			for _, h := range active {
				list = append(list, sidecar.HoldJSON(h))
			}
			if err := json.NewEncoder(out).Encode(list); err != nil {
				return fail(errOut, "holds", err)
			}
			return exitOK
		}
		if len(active) == 0 {
			fmt.Fprintln(out, "no active holds")
			return exitOK
		}
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSCOPE\tDOES\tSOURCE\tACTOR\tEXPIRES IN\tREASON")
		for _, h := range active {
			does := "pause"
			switch {
			case h.Exempt != "":
				does = "exempt from " + textsafe.Line(h.Exempt)
			case !h.Pauses():
				does = fmt.Sprintf("%.0f%%", 100*h.Ratio)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", textsafe.Line(h.ID), textsafe.Line(h.Scope.String()), does, textsafe.Line(string(h.Source)),
				textsafe.Line(h.Actor), time.Until(h.Expires).Round(time.Second), textsafe.Line(h.Reason))
		}
		tw.Flush()
		return exitOK
	})
}

func newAuditCmd(lf *logFlags) *cobra.Command {
	var cf coordFlags
	var since time.Duration
	c := &cobra.Command{
		Use:     "audit",
		Short:   "read the audit log of holds, mode changes and pauses not honoured",
		Long:    "The audit log: holds, releases, resumes, mode changes, settings, windows and pauses not honoured, with who and why.",
		Example: "  throttled audit --since 24h\n  throttled audit --since 1h --json",
	}
	coordCmd(lf, c, &cf, false, "print one JSON object per line", func(ctx context.Context, _ *cobra.Command, out, errOut io.Writer) int {
		if since <= 0 {
			return fail(errOut, "audit", usageError(fmt.Errorf("--since must be positive, got %s", since)))
		}
		ctx, cancel := context.WithTimeout(ctx, cf.timeout)
		defer cancel()
		b, err := cf.backend(ctx, false)
		if err != nil {
			return fail(errOut, "audit", err)
		}
		defer b.close()
		entries, err := b.audit(ctx, since)
		if err != nil {
			return fail(errOut, "audit", err)
		}
		if cf.json {
			enc := json.NewEncoder(out)
			for _, e := range entries {
				if err := enc.Encode(e); err != nil {
					return fail(errOut, "audit", err)
				}
			}
			return exitOK
		}
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tEVENT\tHOLD\tACTOR\tSOURCE\tREASON")
		for _, e := range entries {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), textsafe.Line(e.Event), textsafe.Line(firstNonEmpty(e.HoldID, "-")),
				textsafe.Line(e.Actor), textsafe.Line(e.Source), textsafe.Line(e.Reason))
		}
		tw.Flush()
		return exitOK
	})
	c.Flags().DurationVar(&since, "since", 24*time.Hour, "how far back")
	return c
}
