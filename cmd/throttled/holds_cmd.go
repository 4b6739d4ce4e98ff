package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mattn/go-isatty"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/throttle"
)

// coordFlags are the flags every holds command takes.
type coordFlags struct {
	dsn   string
	addr  string // a sidecar's API instead of the database
	token string
	actor string
	json  bool
}

func (c *coordFlags) register(fs *flag.FlagSet, withActor bool) {
	fs.StringVar(&c.dsn, "primary-dsn", "", "the primary, as a role that may write schema throttled (default $THROTTLED_PRIMARY_DSN)")
	fs.StringVar(&c.addr, "addr", "", "a sidecar's URL, such as http://127.0.0.1:18087, instead of the database (token from $THROTTLED_TOKEN)")
	if withActor {
		fs.StringVar(&c.actor, "actor", "", "who is acting (default: the OS user; through --addr, the token's name)")
	}
}

func (c *coordFlags) resolve(getenv func(string) string) error {
	if c.addr != "" {
		if c.token = getenv("THROTTLED_TOKEN"); c.token == "" {
			return fmt.Errorf("%w: --addr needs a token in THROTTLED_TOKEN", errUsage)
		}
		return nil
	}
	c.dsn = firstNonEmpty(c.dsn, getenv("THROTTLED_PRIMARY_DSN"))
	if c.dsn == "" {
		return fmt.Errorf("%w: --primary-dsn (or THROTTLED_PRIMARY_DSN), or --addr, is required", errUsage)
	}
	if c.actor == "" {
		c.actor = getenv("USER")
		if u, err := user.Current(); err == nil && u.Username != "" {
			c.actor = u.Username
		}
	}
	return nil
}

// openStore connects and migrates, bounded by 10 s.
func openStore(ctx context.Context, dsn string, cfg holds.Config) (*holds.Store, *pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: --primary-dsn: %w", errUsage, err)
	}
	pcfg.MaxConns = 2
	pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pcfg.ConnConfig.RuntimeParams["application_name"] = "throttled-cli"
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, nil, err
	}
	store, err := holds.NewStore(ctx, pool, cfg)
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

func (s *scopeFlags) register(fs *flag.FlagSet, verb string) {
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

func runPause(ctx context.Context, args []string, out, errOut io.Writer) int {
	return placeHold(ctx, "pause", args, out, errOut)
}

// runThrottle places a live override: a hold that scales its jobs to
// --ratio of their rate instead of pausing them.
func runThrottle(ctx context.Context, args []string, out, errOut io.Writer) int {
	return placeHold(ctx, "throttle", args, out, errOut)
}

// placeHold is pause (a hold that stops its jobs) and throttle (one that
// scales them, --ratio): the same flags, the same checks, one audit line.
func placeHold(ctx context.Context, cmd string, args []string, out, errOut io.Writer) int {
	var cf coordFlags
	var sf scopeFlags
	var ttl time.Duration
	var reason string
	var ratio float64
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	cf.register(fs, true)
	sf.register(fs, cmd)
	fs.DurationVar(&ttl, "ttl", throttle.DefaultHoldTTL, "how long the hold lasts, at most the cluster's cap (holds.max_ttl of throttled run, 24h by default); every hold expires")
	fs.StringVar(&reason, "reason", "", "why (required; shown to everyone and audited)")
	if cmd == "throttle" {
		fs.Float64Var(&ratio, "ratio", 0, "the share of their rate the jobs run at, above 0 and at most 1, such as 0.3 (required; throttled pause stops them)")
	}
	if err := parse(fs, args, errOut); err != nil {
		return fail(errOut, cmd, err)
	}
	sc, err := sf.scope()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if strings.TrimSpace(reason) == "" {
		errs = append(errs, errors.New("--reason is required"))
	}
	if ttl <= 0 {
		errs = append(errs, fmt.Errorf("--ttl must be positive, got %s", ttl))
	}
	if cmd == "throttle" && !(ratio > 0 && ratio <= 1) {
		errs = append(errs, fmt.Errorf("--ratio must be above 0 and at most 1, got %v (to stop the jobs, throttled pause)", ratio))
	}
	if err := cf.resolve(os.Getenv); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fail(errOut, cmd, fmt.Errorf("%w: %w", errUsage, errors.Join(errs...)))
	}
	b, err := cf.backend(ctx)
	if err != nil {
		return fail(errOut, cmd, err)
	}
	defer b.close()
	h, err := b.add(ctx, sc, ttl, reason, ratio)
	if errors.Is(err, throttle.ErrInvalidHold) {
		return fail(errOut, cmd, fmt.Errorf("%w: %w", errUsage, err))
	}
	if err != nil {
		return fail(errOut, cmd, err)
	}
	what := ""
	if !h.Pauses() {
		what = fmt.Sprintf(" at %.0f%%", 100*h.Ratio)
	}
	fmt.Fprintf(out, "hold %s on %s%s by %s until %s: %s\n", h.ID, h.Scope, what, h.Actor, h.Expires.UTC().Format(time.RFC3339), h.Reason)
	return exitOK
}

// setHoldCap writes cfg's holds.max_ttl as the cluster's cap on holds,
// which the database enforces for every client: `throttled run` calls it
// at start and on each applied reload, so the sidecar's file is the
// authority. Bounded by 5 s.
func setHoldCap(ctx context.Context, store *holds.Store, cfg *config.Config, path string, log hclog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	old, err := store.SetMaxTTL(ctx, cfg.HoldMax, "throttled", throttle.SourceAuto,
		fmt.Sprintf("holds.max_ttl of %s (version %s)", path, cfg.Version))
	if err != nil {
		return fmt.Errorf("%s: holds.max_ttl %s: %w", path, cfg.HoldMax, err)
	}
	if old != cfg.HoldMax {
		log.Info("cluster hold cap set", "max_ttl", cfg.HoldMax, "previous", old, "file", path)
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

func runResume(ctx context.Context, args []string, out, errOut io.Writer) int {
	return resume(ctx, args, console{in: os.Stdin, terminal: isatty.IsTerminal(os.Stdin.Fd())}, out, errOut)
}

const resumeUsage = `Release holds; jobs restart slowly. Exactly one of:
  --hold ID        that one hold (an ID from throttled holds)
  --job NAME       the holds on exactly job:NAME
  --prefix PREFIX  the holds on exactly group:PREFIX
  --scope SCOPE    the holds with exactly this scope: all, job:NAME or group:PREFIX
                   (--scope all releases the hold on all jobs alone)
  --all            every active hold of every scope, after a confirmation listing them;
                   --yes skips it, and is required when stdin is not a terminal
  --latched        end the cluster's latched critical pause instead`

func resume(ctx context.Context, args []string, con console, out, errOut io.Writer) int {
	var cf coordFlags
	var id, job, prefix, scope, reason string
	var every, yes, latched bool
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	cf.register(fs, true)
	fs.StringVar(&id, "hold", "", "release the hold with this `ID` (from throttled holds)")
	fs.StringVar(&job, "job", "", "release the holds on exactly this job (scope job:NAME)")
	fs.StringVar(&prefix, "prefix", "", "release the holds on exactly this group (scope group:PREFIX)")
	fs.StringVar(&scope, "scope", "", "release the holds with exactly this scope: all, job:NAME or group:PREFIX")
	fs.BoolVar(&every, "all", false, "release every active hold of every scope, after a confirmation listing them")
	fs.BoolVar(&yes, "yes", false, "with --all: release without asking (required when stdin is not a terminal)")
	fs.BoolVar(&latched, "latched", false, "end the cluster's latched critical pause (the leader acts within a tick)")
	fs.StringVar(&reason, "reason", "", "why (audited)")
	if err := parse(fs, args, errOut); err != nil {
		return fail(errOut, "resume", err)
	}
	if err := cf.resolve(os.Getenv); err != nil {
		return fail(errOut, "resume", err)
	}
	if err := throttle.Storable(reason); err != nil {
		return fail(errOut, "resume", fmt.Errorf("%w: --reason: %w", errUsage, err))
	}
	chosen := 0
	for _, set := range []bool{id != "", job != "", prefix != "", scope != "", every} {
		if set {
			chosen++
		}
	}
	if latched {
		if chosen > 0 {
			return fail(errOut, "resume", fmt.Errorf("%w: --latched ends the critical pause; release holds in another call", errUsage))
		}
		b, err := cf.backend(ctx)
		if err != nil {
			return fail(errOut, "resume", err)
		}
		defer b.close()
		if err := b.resumeLatched(ctx, reason); err != nil {
			return fail(errOut, "resume", err)
		}
		fmt.Fprintln(out, "resume requested: the leader ends the latch within a tick; jobs restart once the signals are calm, slowly")
		return exitOK
	}
	if chosen != 1 {
		return fail(errOut, "resume", fmt.Errorf("%w: give exactly one of --hold ID, --job, --prefix, --scope and --all (--all: every hold of every scope)", errUsage))
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
		return fail(errOut, "resume", fmt.Errorf("%w: %w", errUsage, err))
	}
	if every && !yes && !con.terminal {
		return fail(errOut, "resume", fmt.Errorf("%w: --all releases every active hold of every scope: add --yes to confirm, as stdin is not a terminal to ask on "+
			"(--scope all releases the hold on all jobs alone)", errUsage))
	}

	r, err := cf.backend(ctx)
	if err != nil {
		return fail(errOut, "resume", err)
	}
	defer r.close()
	if id != "" {
		h, err := r.release(ctx, id, reason)
		if err != nil {
			return fail(errOut, "resume", err)
		}
		printReleased(out, []throttle.Hold{h})
		return exitOK
	}
	active, err := r.active(ctx)
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
	var released []throttle.Hold
	for _, h := range chosenHolds {
		got, err := r.release(ctx, h.ID, reason)
		if errors.Is(err, throttle.ErrUnknownHold) {
			fmt.Fprintf(out, "hold %s had already ended\n", h.ID)
			continue
		}
		if err != nil {
			printReleased(out, released)
			return fail(errOut, "resume", fmt.Errorf("release hold %s (%d of %d released): %w", h.ID, len(released), len(chosenHolds), err))
		}
		released = append(released, got)
	}
	printReleased(out, released)
	return exitOK
}

// confirm lists hs on w and asks whether to release them all; only "y" or
// "yes" confirms.
func confirm(in io.Reader, w io.Writer, hs []throttle.Hold) (bool, error) {
	fmt.Fprintf(w, "%d active holds, of every scope:\n", len(hs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tSCOPE\tSOURCE\tACTOR\tREASON")
	for _, h := range hs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", h.ID, h.Scope, h.Source, h.Actor, h.Reason)
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

func printReleased(out io.Writer, hs []throttle.Hold) {
	for _, h := range hs {
		fmt.Fprintf(out, "released hold %s on %s (made by %s: %s)\n", h.ID, h.Scope, h.Actor, h.Reason)
	}
	if len(hs) > 0 {
		fmt.Fprintln(out, "jobs restart slowly: at a quarter of their rate before the pause")
	}
}

func runHolds(ctx context.Context, args []string, out, errOut io.Writer) int {
	var cf coordFlags
	fs := flag.NewFlagSet("holds", flag.ContinueOnError)
	cf.register(fs, false)
	fs.BoolVar(&cf.json, "json", false, "print a JSON array")
	if err := parse(fs, args, errOut); err != nil {
		return fail(errOut, "holds", err)
	}
	if err := cf.resolve(os.Getenv); err != nil {
		return fail(errOut, "holds", err)
	}
	b, err := cf.backend(ctx)
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
		if !h.Pauses() {
			does = fmt.Sprintf("%.0f%%", 100*h.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", h.ID, h.Scope, does, h.Source, h.Actor, time.Until(h.Expires).Round(time.Second), h.Reason)
	}
	tw.Flush()
	return exitOK
}

func runAudit(ctx context.Context, args []string, out, errOut io.Writer) int {
	var cf coordFlags
	var since time.Duration
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	cf.register(fs, false)
	fs.DurationVar(&since, "since", 24*time.Hour, "how far back")
	fs.BoolVar(&cf.json, "json", false, "print one JSON object per line")
	if err := parse(fs, args, errOut); err != nil {
		return fail(errOut, "audit", err)
	}
	if err := cf.resolve(os.Getenv); err != nil {
		return fail(errOut, "audit", err)
	}
	if since <= 0 {
		return fail(errOut, "audit", fmt.Errorf("%w: --since must be positive, got %s", errUsage, since))
	}
	b, err := cf.backend(ctx)
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), e.Event, firstNonEmpty(e.HoldID, "-"), e.Actor, e.Source, e.Reason)
	}
	tw.Flush()
	return exitOK
}
