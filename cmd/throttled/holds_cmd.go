package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/sidecar"
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
	if cf.addr != "" {
		raw, err := apiCall(ctx, cf.addr, cf.token, "POST", "/v1/holds", map[string]string{"scope": sc.String(), "ttl": ttl.String(), "reason": reason})
		if err != nil {
			return fail(errOut, "pause", err)
		}
		var h map[string]any
		_ = json.Unmarshal(raw, &h)
		fmt.Fprintf(out, "hold %v on %v by %v until %v: %v\n", h["id"], h["scope"], h["actor"], h["expires"], h["reason"])
		return exitOK
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
	var latched bool
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	cf.register(fs, true)
	sf.register(fs, "release the holds on")
	fs.StringVar(&id, "hold", "", "release this hold (an ID from `throttled holds`)")
	fs.BoolVar(&latched, "latched", false, "end the cluster's latched critical pause (the leader acts within a tick)")
	fs.StringVar(&reason, "reason", "", "why (audited)")
	if err := parse(fs, args, errOut); err != nil {
		return fail(errOut, "resume", err)
	}
	if err := cf.resolve(os.Getenv); err != nil {
		return fail(errOut, "resume", err)
	}
	if latched {
		if id != "" || sf.job != "" || sf.prefix != "" || sf.all {
			return fail(errOut, "resume", fmt.Errorf("%w: --latched ends the critical pause; release holds in another call", errUsage))
		}
		return resumeLatched(ctx, cf, reason, out, errOut)
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
	if cf.addr != "" {
		return resumeAPI(ctx, cf, id, sc, reason, out, errOut)
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
	var active []throttle.Hold
	if cf.addr != "" {
		raw, err := apiCall(ctx, cf.addr, cf.token, "GET", "/v1/holds", nil)
		if err != nil {
			return fail(errOut, "holds", err)
		}
		if active, err = holdsFromAPI(raw); err != nil {
			return fail(errOut, "holds", err)
		}
	} else {
		store, pool, err := openStore(ctx, cf.dsn, holds.Config{})
		if err != nil {
			return fail(errOut, "holds", err)
		}
		defer pool.Close()
		if active, err = store.Active(ctx); err != nil {
			return fail(errOut, "holds", err)
		}
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
	var entries []holds.Entry
	if cf.addr != "" {
		raw, err := apiCall(ctx, cf.addr, cf.token, "GET", "/v1/audit?since="+since.String(), nil)
		if err == nil {
			err = json.Unmarshal(raw, &entries)
		}
		if err != nil {
			return fail(errOut, "audit", err)
		}
	} else {
		store, pool, err := openStore(ctx, cf.dsn, holds.Config{})
		if err != nil {
			return fail(errOut, "audit", err)
		}
		defer pool.Close()
		if entries, err = store.AuditSince(ctx, time.Now().Add(-since)); err != nil {
			return fail(errOut, "audit", err)
		}
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

// holdsFromAPI reads GET /v1/holds.
func holdsFromAPI(raw []byte) ([]throttle.Hold, error) {
	var list []struct {
		ID      string          `json:"id"`
		Scope   string          `json:"scope"`
		Source  throttle.Source `json:"source"`
		Reason  string          `json:"reason"`
		Actor   string          `json:"actor"`
		Created time.Time       `json:"created"`
		Expires time.Time       `json:"expires"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, err
	}
	var out []throttle.Hold
	for _, h := range list {
		sc, err := sidecar.ParseScope(h.Scope)
		if err != nil {
			return nil, err
		}
		out = append(out, throttle.Hold{ID: h.ID, Scope: sc, Source: h.Source, Reason: h.Reason, Actor: h.Actor, Created: h.Created, Expires: h.Expires})
	}
	return out, nil
}

// resumeAPI releases holds through a sidecar: one by ID, or every active
// hold with exactly the scope.
// resumeLatched asks the leader to end a latched critical pause, through
// the sidecar's API or the database.
func resumeLatched(ctx context.Context, cf coordFlags, reason string, out, errOut io.Writer) int {
	if cf.addr != "" {
		if _, err := apiCall(ctx, cf.addr, cf.token, "POST", "/v1/resume", map[string]string{"reason": reason}); err != nil {
			return fail(errOut, "resume", err)
		}
	} else {
		store, pool, err := openStore(ctx, cf.dsn, holds.Config{})
		if err != nil {
			return fail(errOut, "resume", err)
		}
		defer pool.Close()
		if err := throttled.RequestResume(ctx, pool, store, cf.actor, reason); err != nil {
			return fail(errOut, "resume", err)
		}
	}
	fmt.Fprintln(out, "resume requested: the leader ends the latch within a tick; jobs restart once the signals are calm, slowly")
	return exitOK
}

func resumeAPI(ctx context.Context, cf coordFlags, id string, sc throttle.Scope, reason string, out, errOut io.Writer) int {
	var ids []string
	if id != "" {
		ids = []string{id}
	} else {
		raw, err := apiCall(ctx, cf.addr, cf.token, "GET", "/v1/holds", nil)
		if err != nil {
			return fail(errOut, "resume", err)
		}
		active, err := holdsFromAPI(raw)
		if err != nil {
			return fail(errOut, "resume", err)
		}
		for _, h := range active {
			if h.Scope == sc {
				ids = append(ids, h.ID)
			}
		}
		if len(ids) == 0 {
			return fail(errOut, "resume", fmt.Errorf("no active hold on %s; see `throttled holds`", sc))
		}
	}
	for _, hid := range ids {
		if _, err := apiCall(ctx, cf.addr, cf.token, "DELETE", "/v1/holds/"+url.PathEscape(hid)+"?reason="+url.QueryEscape(reason), nil); err != nil {
			return fail(errOut, "resume", err)
		}
		fmt.Fprintf(out, "released hold %s\n", hid)
	}
	fmt.Fprintln(out, "jobs restart slowly: at a quarter of their rate before the pause")
	return exitOK
}

// runStatus shows the cluster's pacing: through a sidecar's API, or from
// the leader's last publication and the workers' leases in the database.
func runStatus(ctx context.Context, args []string, out, errOut io.Writer) int {
	var cf coordFlags
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	cf.register(fs, false)
	fs.BoolVar(&cf.json, "json", false, "print JSON")
	if err := parse(fs, args, errOut); err != nil {
		return fail(errOut, "status", err)
	}
	if err := cf.resolve(os.Getenv); err != nil {
		return fail(errOut, "status", err)
	}
	if cf.addr != "" {
		raw, err := apiCall(ctx, cf.addr, cf.token, "GET", "/v1/status", nil)
		if err != nil {
			return fail(errOut, "status", err)
		}
		if cf.json {
			out.Write(raw)
			return exitOK
		}
		var st map[string]any
		_ = json.Unmarshal(raw, &st)
		fmt.Fprintf(out, "leader: %v  mode: %v  budget: %v batches/s  binding: %v\nreason: %v\nconfig version: %v\n",
			st["leader"], st["mode"], st["budget"], st["binding"], st["reason"], st["config_version"])
		return exitOK
	}
	_, pool, err := openStore(ctx, cf.dsn, holds.Config{})
	if err != nil {
		return fail(errOut, "status", err)
	}
	defer pool.Close()
	type workerRow struct {
		ID, Job, State, Reason string
		Rate                   float64
		LeaseValid             bool
	}
	st := struct {
		Leader, Mode, Binding, Reason string
		Budget                        float64
		PublishedAt                   time.Time
		Workers                       []workerRow
	}{}
	err = pool.QueryRow(ctx, "SELECT leader, mode, binding, reason, budget, published_at FROM throttled.leader WHERE id = 1").
		Scan(&st.Leader, &st.Mode, &st.Binding, &st.Reason, &st.Budget, &st.PublishedAt)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fail(errOut, "status", err)
	}
	rows, err := pool.Query(ctx, `SELECT id, job, state, reason, alloc_rate, lease_until > now() FROM throttled.workers
		WHERE heartbeat_at > now() - interval '10 seconds' ORDER BY job, id`)
	if err != nil {
		return fail(errOut, "status", err)
	}
	st.Workers, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (workerRow, error) {
		var w workerRow
		return w, r.Scan(&w.ID, &w.Job, &w.State, &w.Reason, &w.Rate, &w.LeaseValid)
	})
	if err != nil {
		return fail(errOut, "status", err)
	}
	if cf.json {
		_ = json.NewEncoder(out).Encode(st)
		return exitOK
	}
	if st.Leader == "" {
		fmt.Fprintln(out, "no leader has published yet")
	} else {
		fmt.Fprintf(out, "leader %s, %s ago: mode %s, budget %.2f batches/s, binding %s\nreason: %s\n",
			st.Leader, time.Since(st.PublishedAt).Round(time.Millisecond), st.Mode, st.Budget, firstNonEmpty(st.Binding, "-"), st.Reason)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tJOB\tSTATE\tRATE\tLEASE\tREASON")
	for _, w := range st.Workers {
		lease := "valid"
		if !w.LeaseValid {
			lease = "expired"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\t%s\n", w.ID, w.Job, w.State, w.Rate, lease, w.Reason)
	}
	tw.Flush()
	return exitOK
}
