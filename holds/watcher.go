package holds

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
)

// WatcherConfig configures a [Watcher].
type WatcherConfig struct {
	// Poll is how often the holds are read even without a notification:
	// the backstop for a notification missed while reconnecting. Defaults
	// to 1s.
	Poll time.Duration
	// MaxUnconfirmed is how long the watcher trusts its last successful
	// read. Past it, every job counts as held. Defaults to 3s.
	MaxUnconfirmed time.Duration
	// QueryTimeout bounds each read. Defaults to 2s.
	QueryTimeout time.Duration
	// Logger defaults to a null logger.
	Logger hclog.Logger
}

// UnconfirmedHoldID is the ID of the hold a Watcher reports on every job
// while it cannot confirm the hold state.
const UnconfirmedHoldID = "unconfirmed"

// Watcher keeps this process's view of the holds: it LISTENs for changes
// on a dedicated connection, rereads on every notification and every
// Poll, and audits expiries. It satisfies throttle.HoldSource. While it
// cannot confirm the state (database unreachable, channel lost and poll
// failing) for MaxUnconfirmed, it reports a hold on every job: fail
// closed. Its methods are safe for concurrent use.
//
// Expiry is the database's: each read also returns every hold's remaining
// life by the database's clock, which the watcher turns into a deadline on
// this process's clock (monotonic) at read time. A process whose wall
// clock runs ahead of the database's does not drop a hold early. The
// holds it returns keep the database's Created and Expires, for display.
type Watcher struct {
	db  *pgxpool.Pool
	cfg WatcherConfig
	log hclog.Logger
	now func() time.Time // this process's clock; a seam for tests

	mu        sync.Mutex
	holds     []watched
	windows   hold.Windows
	confirmed time.Time
	lastErr   error
	changed   chan struct{}
}

// watched is a hold as last read, with its creation and expiry on this
// process's clock.
type watched struct {
	hold.Hold
	since, until time.Time
}

var _ throttle.HoldSource = (*Watcher)(nil)

// NewWatcher returns a Watcher reading db. Call Refresh before relying on
// it, and Run to keep it current.
func NewWatcher(db *pgxpool.Pool, cfg WatcherConfig) *Watcher {
	cfg.Poll = cmp.Or(cfg.Poll, time.Second)
	cfg.MaxUnconfirmed = cmp.Or(cfg.MaxUnconfirmed, 3*time.Second)
	cfg.QueryTimeout = cmp.Or(cfg.QueryTimeout, 2*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Watcher{db: db, cfg: cfg, log: cfg.Logger, now: time.Now, changed: make(chan struct{})}
}

// Refresh reads the active holds now, audits any that expired, and
// reports whether it could.
func (w *Watcher) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.QueryTimeout)
	defer cancel()
	if expired, err := expireDue(ctx, w.db); err == nil {
		for _, h := range expired {
			w.log.Info("hold expired", "hold", h.ID, "scope", h.Scope.String(), "actor", h.Actor)
		}
	}
	hs, at, err := w.read(ctx)
	var ws hold.Windows
	if err == nil {
		ws, err = readWindows(ctx, w.db)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.lastErr = err
		return err
	}
	if !sameHolds(w.holds, hs) || !sameWindows(w.windows, ws) {
		close(w.changed)
		w.changed = make(chan struct{})
	}
	w.holds, w.windows, w.confirmed, w.lastErr = hs, ws, at, nil
	return nil
}

// read returns the active holds and the instant of the read on this
// process's clock, taken after the query returns. Each hold's age and
// remaining life by the database's clock become instants on this
// process's clock from that one: a hold's local deadline is, if anything,
// late (by the query's duration), never early.
func (w *Watcher) read(ctx context.Context) ([]watched, time.Time, error) {
	rows, err := w.db.Query(ctx, `SELECT `+holdColumns+`,
			extract(epoch FROM now() - created_at)::float8, extract(epoch FROM expires_at - now())::float8
		FROM throttled.holds WHERE released_at IS NULL AND expires_at > now() ORDER BY created_at, id`)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("holds: read: %w", err)
	}
	type aged struct {
		h         hold.Hold
		age, left float64
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (aged, error) {
		var a aged
		var id int64
		var kind, source string
		err := r.Scan(&id, &kind, &a.h.Scope.Value, &source, &a.h.Reason, &a.h.Actor, &a.h.Created, &a.h.Expires, &a.h.Ratio, &a.h.Exempt, &a.age, &a.left)
		a.h.ID, a.h.Scope.Kind, a.h.Source = "h"+strconv.FormatInt(id, 10), hold.ScopeKind(kind), hold.Source(source)
		return a, err
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("holds: read: %w", err)
	}
	at := w.now()
	out := make([]watched, 0, len(got))
	for _, a := range got {
		out = append(out, watched{Hold: a.h, since: at.Add(-seconds(a.age)), until: at.Add(seconds(a.left))})
	}
	return out, at, nil
}

func sameWindows(a, b hold.Windows) bool {
	return slices.Equal(windowRows(a), windowRows(b))
}

func sameHolds(a, b []watched) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || !a[i].Expires.Equal(b[i].Expires) || a[i].Ratio != b[i].Ratio || a[i].Exempt != b[i].Exempt {
			return false
		}
	}
	return true
}

// Changed returns a channel closed at the next change of the holds.
func (w *Watcher) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// Applying returns the holds that apply to the named job at now, or,
// while the state is unconfirmed, one hold on every job saying why. now
// is on this process's clock (time.Now()): a hold applies until its
// deadline on that clock, not until its Expires read against it.
func (w *Watcher) Applying(now time.Time, job string) []hold.Hold {
	ws := w.applying(now, job)
	out := make([]hold.Hold, 0, len(ws))
	for _, h := range ws {
		out = append(out, h.Hold)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// applying is Applying with each hold's instants on this process's clock.
func (w *Watcher) applying(now time.Time, job string) []watched {
	w.mu.Lock()
	defer w.mu.Unlock()
	if age := now.Sub(w.confirmed); w.confirmed.IsZero() || age > w.cfg.MaxUnconfirmed {
		why := "never read"
		if !w.confirmed.IsZero() {
			why = fmt.Sprintf("last read %s ago", age.Round(time.Millisecond))
		}
		if w.lastErr != nil {
			why += ": " + w.lastErr.Error()
		}
		return []watched{{Hold: hold.Hold{ID: UnconfirmedHoldID, Scope: hold.AllJobs(), Source: hold.SourceAuto,
			Reason: "hold state unconfirmed (" + why + ")", Actor: "throttled", Created: now, Expires: now}, since: now, until: now}}
	}
	var out []watched
	for _, h := range w.holds {
		if h.until.After(now) && h.Scope.Matches(job) {
			out = append(out, h)
		}
	}
	// Windows are the cluster's, read with the holds; their edges are this
	// process's wall clock in the window's zone.
	for _, h := range w.windows.Applying(now, job) {
		out = append(out, watched{Hold: h, since: h.Created, until: h.Expires})
	}
	return out
}

// Windows returns the cluster's windows as last read.
func (w *Watcher) Windows() hold.Windows {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.windows
}

// Active returns the last confirmed holds that have not ended, by their
// deadlines on this process's clock (so a process whose wall clock runs
// ahead does not drop them early).
func (w *Watcher) Active() []hold.Hold {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]hold.Hold, 0, len(w.holds))
	for _, h := range w.holds {
		if h.until.After(now) {
			out = append(out, h.Hold)
		}
	}
	// The windows' holds too, so the metrics, the API's hold list and the
	// dashboards' annotations show them.
	for _, j := range slices.Sorted(maps.Keys(w.windows)) {
		out = append(out, w.windows.Applying(now, j)...)
	}
	return out
}

// Run keeps the view current until ctx ends: LISTEN on a dedicated
// connection, reread on each notification and each Poll; reconnect with
// backoff when the connection is lost, polling meanwhile.
func (w *Watcher) Run(ctx context.Context) error {
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := w.listen(ctx)
		if err != nil {
			w.log.Warn("cannot listen for hold changes; polling", "error", err)
			w.pollFor(ctx, backoff)
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 250 * time.Millisecond
		_ = w.Refresh(ctx) // a change made while not listening
		for ctx.Err() == nil {
			wctx, cancel := context.WithTimeout(ctx, w.cfg.Poll)
			_, err := conn.WaitForNotification(wctx)
			cancel()
			if err != nil && ctx.Err() == nil && wctx.Err() == nil || conn.IsClosed() {
				w.log.Warn("hold notifications lost; reconnecting", "error", err)
				break
			}
			if err := w.Refresh(ctx); err != nil {
				w.log.Warn("cannot read holds", "error", err)
			}
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = conn.Close(cctx)
		cancel()
	}
	return ctx.Err()
}

func (w *Watcher) listen(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, w.db.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return conn, nil
}

// pollFor refreshes every Poll for d.
func (w *Watcher) pollFor(ctx context.Context, d time.Duration) {
	end := time.NewTimer(d)
	defer end.Stop()
	t := time.NewTicker(w.cfg.Poll)
	defer t.Stop()
	_ = w.Refresh(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-end.C:
			return
		case <-t.C:
			_ = w.Refresh(ctx)
		}
	}
}
