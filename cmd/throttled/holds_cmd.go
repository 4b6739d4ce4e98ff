package main

import (
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

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/throttle"
)

// coordFlags are the flags every holds command takes.
type coordFlags struct {
	dsn   string
	actor string
	json  bool
}

func (c *coordFlags) register(fs *flag.FlagSet, withActor bool) {
	fs.StringVar(&c.dsn, "primary-dsn", "", "the primary, as a role that may write schema throttled (default $THROTTLED_PRIMARY_DSN)")
	if withActor {
		fs.StringVar(&c.actor, "actor", "", "who is acting (default: the OS user)")
	}
}

func (c *coordFlags) resolve(getenv func(string) string) error {
	c.dsn = firstNonEmpty(c.dsn, getenv("THROTTLED_PRIMARY_DSN"))
	if c.dsn == "" {
		return fmt.Errorf("%w: --primary-dsn (or THROTTLED_PRIMARY_DSN) is required", errUsage)
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
	var cf coordFlags
	var sf scopeFlags
	var ttl, maxTTL time.Duration
	var reason string
	fs := flag.NewFlagSet("pause", flag.ContinueOnError)
	cf.register(fs, true)
	sf.register(fs, "pause")
	fs.DurationVar(&ttl, "ttl", time.Hour, "how long the hold lasts; every hold expires")
	fs.DurationVar(&maxTTL, "max-ttl", 24*time.Hour, "the longest hold allowed")
	fs.StringVar(&reason, "reason", "", "why (required; shown to everyone and audited)")
	if err := parse(fs, args, errOut); err != nil {
		return fail(errOut, "pause", err)
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
	if err := cf.resolve(os.Getenv); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fail(errOut, "pause", fmt.Errorf("%w: %w", errUsage, errors.Join(errs...)))
	}
	store, pool, err := openStore(ctx, cf.dsn, holds.Config{MaxTTL: maxTTL, DefaultTTL: min(time.Hour, maxTTL)})
	if err != nil {
		return fail(errOut, "pause", err)
	}
	defer pool.Close()
	h, err := store.Add(ctx, holds.Request{Scope: sc, Source: throttle.SourceCLI, Reason: reason, Actor: cf.actor, TTL: ttl})
	if errors.Is(err, holds.ErrInvalid) {
		return fail(errOut, "pause", fmt.Errorf("%w: %w", errUsage, err))
	}
	if err != nil {
		return fail(errOut, "pause", err)
	}
	fmt.Fprintf(out, "hold %s on %s by %s until %s: %s\n", h.ID, h.Scope, h.Actor, h.Expires.UTC().Format(time.RFC3339), h.Reason)
	return exitOK
}

func runResume(ctx context.Context, args []string, out, errOut io.Writer) int {
	var cf coordFlags
	var sf scopeFlags
	var id, reason string
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	cf.register(fs, true)
	sf.register(fs, "release the holds on")
	fs.StringVar(&id, "hold", "", "release this hold (an ID from `throttled holds`)")
	fs.StringVar(&reason, "reason", "", "why (audited)")
	if err := parse(fs, args, errOut); err != nil {
		return fail(errOut, "resume", err)
	}
	if err := cf.resolve(os.Getenv); err != nil {
		return fail(errOut, "resume", err)
	}
	var sc throttle.Scope
	var err error
	if id == "" {
		if sc, err = sf.scope(); err != nil {
			return fail(errOut, "resume", fmt.Errorf("%w: give --hold ID, or %w", errUsage, err))
		}
	} else if sf.job != "" || sf.prefix != "" || sf.all {
		return fail(errOut, "resume", fmt.Errorf("%w: give --hold or a scope, not both", errUsage))
	}
	store, pool, err := openStore(ctx, cf.dsn, holds.Config{})
	if err != nil {
		return fail(errOut, "resume", err)
	}
	defer pool.Close()
	var released []throttle.Hold
	if id != "" {
		h, err := store.Release(ctx, id, cf.actor, throttle.SourceCLI, reason)
		if err != nil {
			return fail(errOut, "resume", err)
		}
		released = append(released, h)
	} else if released, err = store.ReleaseScope(ctx, sc, cf.actor, throttle.SourceCLI, reason); err != nil {
		return fail(errOut, "resume", err)
	}
	if len(released) == 0 {
		return fail(errOut, "resume", fmt.Errorf("no active hold on %s; see `throttled holds`", sc))
	}
	for _, h := range released {
		fmt.Fprintf(out, "released hold %s on %s (made by %s: %s)\n", h.ID, h.Scope, h.Actor, h.Reason)
	}
	fmt.Fprintln(out, "jobs restart slowly: at a quarter of their rate before the pause")
	return exitOK
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
	store, pool, err := openStore(ctx, cf.dsn, holds.Config{})
	if err != nil {
		return fail(errOut, "holds", err)
	}
	defer pool.Close()
	active, err := store.Active(ctx)
	if err != nil {
		return fail(errOut, "holds", err)
	}
	if cf.json {
		type jsonHold struct {
			ID      string    `json:"id"`
			Scope   string    `json:"scope"`
			Source  string    `json:"source"`
			Reason  string    `json:"reason"`
			Actor   string    `json:"actor"`
			Created time.Time `json:"created"`
			Expires time.Time `json:"expires"`
		}
		list := []jsonHold{}
		for _, h := range active {
			list = append(list, jsonHold{h.ID, h.Scope.String(), string(h.Source), h.Reason, h.Actor, h.Created.UTC(), h.Expires.UTC()})
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
	fmt.Fprintln(tw, "ID\tSCOPE\tSOURCE\tACTOR\tEXPIRES IN\tREASON")
	for _, h := range active {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", h.ID, h.Scope, h.Source, h.Actor, time.Until(h.Expires).Round(time.Second), h.Reason)
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
	store, pool, err := openStore(ctx, cf.dsn, holds.Config{})
	if err != nil {
		return fail(errOut, "audit", err)
	}
	defer pool.Close()
	entries, err := store.AuditSince(ctx, time.Now().Add(-since))
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
