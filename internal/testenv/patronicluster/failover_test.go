package patronicluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/coord"
	"github.com/throttled/throttled/internal/testenv/patronicluster"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
)

// commit is one acknowledged batch: the server it committed on, by the
// port and the WAL timeline its transaction saw, and when the commit
// returned.
type commit struct {
	id   int64
	port int
	tl   int
	at   time.Time
}

// ledger records every acknowledged batch commit.
type ledger struct {
	mu      sync.Mutex
	commits []commit
}

func (l *ledger) add(c commit) {
	l.mu.Lock()
	l.commits = append(l.commits, c)
	l.mu.Unlock()
}

func (l *ledger) all() []commit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]commit(nil), l.commits...)
}

// recordingDB begins the job's transactions on the pool and records each
// one that commits, with the server identity its batch read.
type recordingDB struct {
	pool *pgxpool.Pool
	l    *ledger
}

func (d recordingDB) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &recordingTx{Tx: tx, l: d.l}, nil
}

type recordingTx struct {
	pgx.Tx
	l  *ledger
	c  commit
	ok bool // the batch ran and read its server
}

func (t *recordingTx) Commit(ctx context.Context) error {
	if err := t.Tx.Commit(ctx); err != nil {
		return err
	}
	if t.ok {
		t.c.at = time.Now()
		t.l.add(t.c)
	}
	return nil
}

// batchSQL inserts one row and reads, in the same transaction, the server
// it runs on: its port and the timeline of the WAL it writes (a promotion
// starts a new one).
const batchSQL = `INSERT INTO failover_batches (port, tl)
	SELECT inet_server_port(), ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int
	RETURNING id, port, tl`

func batch(ctx context.Context, tx pgx.Tx, _ jobs.Batch) (jobs.Result, error) {
	rt := tx.(*recordingTx)
	if err := tx.QueryRow(ctx, batchSQL).Scan(&rt.c.id, &rt.c.port, &rt.c.tl); err != nil {
		return jobs.Result{}, err
	}
	rt.ok = true
	return jobs.Result{Rows: 1}, nil
}

// state is one reading of a pacer, by the test's monitor.
type state struct {
	at     time.Time
	paused bool
	code   status.Code
}

// monitor reads the job's pacer every 20 ms until ctx ends.
type monitor struct {
	mu     sync.Mutex
	states []state
}

func (m *monitor) run(ctx context.Context, p throttled.JobPacer) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		st := p.Status()
		m.mu.Lock()
		m.states = append(m.states, state{at: time.Now(), paused: st.State == status.JobPaused, code: st.Code})
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// firstPause is the first reading at or after from that found the job
// paused.
func (m *monitor) firstPause(from time.Time) (state, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.states {
		if !s.at.Before(from) && s.paused {
			return s, true
		}
	}
	return state{}, false
}

// measurement is what one event cost.
type measurement struct {
	event, from, to string
	// idle is from the last batch commit before the event to the first
	// on the new primary.
	idle time.Duration
	// stopped is from the last commit before the event to the first
	// reading of the job paused (0 when it never paused).
	stopped time.Duration
	// onDemoted counts batches acknowledged by the old primary after the
	// new one took writes, or on an older timeline after a newer one.
	onDemoted int
	// lost counts acknowledged batches missing on the new primary.
	lost int
	// code is why the job paused.
	code status.Code
}

// The product against a real Patroni cluster, through a switchover and a
// kill -9 failover: a job runs in coordinated mode (two processes, one
// leads) with multi-host DSNs (the sampler's with target_session_attrs
// primary, the job's and coordination's with read-write). After each
// event the job stops within its lease, no batch commits on the demoted
// primary, the sampler samples the new primary and no replica, the holds
// and the audit log are intact, and one process leads again.
func TestFailover(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	leader := c.Nodes[0]
	admin := mustConnect(t, ctx, leader, patronicluster.RoleJob)
	if _, err := admin.Exec(ctx, `CREATE TABLE failover_batches (id bigserial PRIMARY KEY, port int NOT NULL, tl int NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)

	opts := throttled.Options{
		PrimaryDSN:      c.MultiHostDSN(patronicluster.RoleMonitor, "primary"),
		CoordinationDSN: c.MultiHostDSN(patronicluster.RoleOwner, "read-write"),
		Cores:           2,
		Coordinate:      true,
		Controller:      throttle.Config{MaxBudget: 20, InitialBudget: 20},
	}
	pages := &pageLog{}
	opts.OnPrimaryChange = pages.add
	a := open(t, opts)
	pgtest.Eventually(t, 20*time.Second, func() error { return leads(a) })
	b := open(t, opts)

	// Samplers of their own with the other two forms users write:
	// read-write with the nodes in reverse (the leader last), and any with
	// node1 first, which reaches a replica whenever node1 does not lead.
	readWrite := poller(t, c.MultiHostDSN(patronicluster.RoleMonitor, "read-write", c.Nodes[2], c.Nodes[1], c.Nodes[0]))
	anyForm := poller(t, c.MultiHostDSN(patronicluster.RoleMonitor, "any"))

	pcfg, err := pgxpool.ParseConfig(c.MultiHostDSN(patronicluster.RoleJob, "read-write"))
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	l := &ledger{}
	jcfg := jobs.Config{Name: "failover", MaxAttempts: 20, StatementTimeout: 2 * time.Second}
	p, err := b.Pacer(jcfg)
	if err != nil {
		t.Fatal(err)
	}
	job, err := jobs.New(jcfg, recordingDB{pool: pool, l: l}, p, batch)
	if err != nil {
		t.Fatal(err)
	}
	jctx, jstop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- job.Run(jctx) }()
	var mon monitor
	go mon.run(jctx, p)
	t.Cleanup(func() {
		jstop()
		if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("job.Run: %v", err)
		}
	})

	// A person's hold, made before the events, on another job of b's.
	held, err := b.Pacer(jobs.Config{Name: "held"})
	if err != nil {
		t.Fatal(err)
	}
	hold, err := a.DurableHolds().Holds().Add(ctx, hold.Request{Scope: hold.OneJob("held"), Source: hold.SourceManual,
		Reason: "held across the failover", Actor: "failover-test", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 10*time.Second, func() error { return pausedBy(held, hold.Reason) })
	auditBefore := auditRows(t, ctx, c)

	var results []measurement
	for _, ev := range []struct {
		name string
		do   func(old *patronicluster.Node) (*patronicluster.Node, error)
	}{
		{"switchover", func(old *patronicluster.Node) (*patronicluster.Node, error) {
			return c.Switchover(ctx, next(c, old))
		}},
		{"failover (kill -9 of the leader's postmaster)", func(*patronicluster.Node) (*patronicluster.Node, error) {
			return c.KillLeaderPostmaster(ctx)
		}},
	} {
		old, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Work flows on the leader before the event.
		waitCommits(t, l, old.Port, 20, 30*time.Second)
		t0 := time.Now()
		if _, err := ev.do(old); err != nil {
			t.Fatalf("%s: %v", ev.name, err)
		}
		nu, err := c.WaitLeader(ctx, func(n *patronicluster.Node) bool { return n != old })
		if err != nil {
			t.Fatalf("%s: %v", ev.name, err)
		}
		tookWrites := time.Now()
		waitCommits(t, l, nu.Port, 20, 60*time.Second)
		m := measure(ev.name, old, nu, l.all(), t0, tookWrites, &mon)
		m.lost = lostBatches(t, ctx, nu, l.all())
		results = append(results, m)
		t.Logf("%s: %s -> %s: %.2f s without work, stopped %.2f s after the last commit (%s), %d batches on the demoted primary, %d acknowledged batches lost",
			m.event, m.from, m.to, m.idle.Seconds(), m.stopped.Seconds(), m.code, m.onDemoted, m.lost)

		if m.onDemoted != 0 {
			t.Errorf("%s: %d batches committed on the demoted primary %s", ev.name, m.onDemoted, old.Name)
		}
		if ev.name == "switchover" && m.lost != 0 {
			t.Errorf("%s: %d acknowledged batches are missing on the new primary", ev.name, m.lost)
		}
		// Fail closed: with no primary the job stops within its lease
		// (and a tick to notice), or work was back before it ran out.
		limit := coord.DefaultLease + 2*time.Second
		if m.stopped == 0 && m.idle > limit {
			t.Errorf("%s: %.2f s without work and the job never paused", ev.name, m.idle.Seconds())
		}
		if m.stopped > limit {
			t.Errorf("%s: the job paused %.2f s after the last commit; want within the lease (%s) and 2 s", ev.name, m.stopped.Seconds(), coord.DefaultLease)
		}

		// The sampler samples the new primary, and no replica.
		pgtest.Eventually(t, 20*time.Second, func() error { return samplerOn(ctx, c, nu) })
		pgtest.Eventually(t, 20*time.Second, func() error { return samples(ctx, readWrite, nu) })
		if nu == c.Nodes[0] {
			pgtest.Eventually(t, 20*time.Second, func() error { return samples(ctx, anyForm, nu) })
		} else {
			// any reached node1, a replica now: refused, never sampled
			// as the primary.
			pgtest.Eventually(t, 20*time.Second, func() error { return refusesReplica(ctx, anyForm) })
			pgtest.Steady(t, 2*time.Second, func() error { return refusesReplica(ctx, anyForm) })
		}
		// The replicas paced on are the new primary's, each streaming:
		// not the new primary itself, which streamed from the old one.
		pgtest.Eventually(t, 30*time.Second, func() error { return inventory(a, b, c, nu) })
		// The audit log says what happened, and the page went out.
		pgtest.Eventually(t, 20*time.Second, func() error { return pages.saw(old, nu) })
		// One process leads again, on the new primary.
		pgtest.Eventually(t, 20*time.Second, func() error {
			if a.Leader() == b.Leader() {
				return fmt.Errorf("leaders: a %v, b %v", a.Leader(), b.Leader())
			}
			return nil
		})
		// The hold made before still holds, and the audit log kept its
		// rows.
		pgtest.Eventually(t, 10*time.Second, func() error { return pausedBy(held, hold.Reason) })
		if n := auditRows(t, ctx, c); n < auditBefore {
			t.Errorf("%s: audit log has %d rows, had %d before", ev.name, n, auditBefore)
		}
		// The demoted primary comes back as a replica of the new one.
		if err := c.WaitStreaming(ctx, len(c.Nodes)-1); err != nil {
			t.Fatalf("%s: %v", ev.name, err)
		}
	}
	report(t, results)
}

// pageLog keeps what OnPrimaryChange received.
type pageLog struct {
	mu      sync.Mutex
	entries []holds.Entry
}

func (p *pageLog) add(e holds.Entry) {
	p.mu.Lock()
	p.entries = append(p.entries, e)
	p.mu.Unlock()
}

// saw checks that a page said the primary changed from old to nu, with
// its audit entry.
func (p *pageLog) saw(old, nu *patronicluster.Node) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.entries {
		if e.Event == holds.EventPrimaryChanged && e.Detail["from_addr"] == old.Addr() && e.Detail["addr"] == nu.Addr() &&
			strings.Contains(e.Reason, "primary changed from "+old.Addr()) {
			return nil
		}
	}
	return fmt.Errorf("no page for the primary changing from %s to %s in %+v", old.Addr(), nu.Addr(), p.entries)
}

// poller is a sampler on dsn, closed when the test ends.
func poller(t *testing.T, dsn string) *signals.Poller {
	t.Helper()
	p, err := signals.New(signals.Config{PrimaryDSN: dsn, Cores: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// samples ticks p and checks that it read the primary, nu, freshly.
func samples(ctx context.Context, p *signals.Poller, nu *patronicluster.Node) error {
	p.Tick(ctx)
	snap := p.Snapshot()
	s, ok := snap.Get(signals.PrimaryLoad, nil)
	if !ok || s.Err != nil || s.Stale(snap.At, snap.MaxAge) {
		return fmt.Errorf("primary_load %+v", s)
	}
	if id, ok := p.Primary(); !ok || id.Addr != nu.Addr() {
		return fmt.Errorf("sampled primary %s; want %s", id, nu.Addr())
	}
	return nil
}

// refusesReplica ticks p and checks that its primary signals failed
// because the server it reached is in recovery.
func refusesReplica(ctx context.Context, p *signals.Poller) error {
	p.Tick(ctx)
	s, ok := p.Snapshot().Get(signals.PrimaryLoad, nil)
	if !ok || !errors.Is(s.Err, signals.ErrWrongServer) || !strings.Contains(s.Err.Error(), "recovery") {
		return fmt.Errorf("any: primary_load %+v, %v; want it refused as a server in recovery", s, ok)
	}
	return nil
}

// inventory checks the leading process's replica lag samples: one per
// node but nu, each read (so streaming), and none for nu.
func inventory(a, b *throttled.Client, c *patronicluster.Cluster, nu *patronicluster.Node) error {
	l := a
	if b.Leader() {
		l = b
	}
	if !l.Leader() {
		return errors.New("no process leads")
	}
	snap := l.Snapshot()
	got := map[string]error{}
	for _, s := range snap.Samples {
		if s.Name == signals.ReplicaLagBytes {
			err := s.Err
			if err == nil && s.Stale(snap.At, snap.MaxAge) {
				err = errors.New("stale")
			}
			got[s.Labels[signals.LabelReplica]] = err
		}
	}
	for _, n := range c.Nodes {
		err, ok := got[n.Name]
		switch {
		case n == nu && ok:
			return fmt.Errorf("replica lag of %s, the primary now: %v", n.Name, err)
		case n != nu && (!ok || err != nil):
			return fmt.Errorf("replica %s: sampled %v, %v", n.Name, ok, err)
		}
	}
	if len(got) != len(c.Nodes)-1 {
		return fmt.Errorf("replica lag of %v; want the %d nodes but %s", got, len(c.Nodes)-1, nu.Name)
	}
	return nil
}

// measure reads one event's cost from the ledger and the monitor: t0 is
// when the event began, tookWrites when the test saw the new leader take
// writes.
func measure(event string, old, nu *patronicluster.Node, cs []commit, t0, tookWrites time.Time, mon *monitor) measurement {
	m := measurement{event: event, from: old.Name, to: nu.Name}
	var last, first time.Time
	maxTL := 0
	for _, x := range cs {
		if x.tl < maxTL {
			m.onDemoted++ // an older timeline after a newer one
		}
		maxTL = max(maxTL, x.tl)
		switch {
		case x.port == old.Port && !x.at.After(tookWrites):
			last = x.at
		case x.port == old.Port && x.at.After(tookWrites):
			m.onDemoted++
		case x.port == nu.Port && x.at.After(t0) && first.IsZero():
			first = x.at
		}
	}
	m.idle = first.Sub(last)
	if s, ok := mon.firstPause(last); ok && s.at.Before(first) {
		m.stopped, m.code = s.at.Sub(last), s.code
	}
	return m
}

// lostBatches counts acknowledged batches whose rows the new primary does
// not have.
func lostBatches(t *testing.T, ctx context.Context, nu *patronicluster.Node, cs []commit) int {
	t.Helper()
	conn := mustConnect(t, ctx, nu, patronicluster.RoleAdmin)
	defer conn.Close(ctx)
	ids := make([]int64, len(cs))
	for i, x := range cs {
		ids[i] = x.id
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM unnest($1::bigint[]) i WHERE NOT EXISTS (SELECT 1 FROM failover_batches WHERE id = i)`, ids).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitCommits waits until n batches have committed on the server at port.
func waitCommits(t *testing.T, l *ledger, port, n int, within time.Duration) {
	t.Helper()
	start := len(l.all())
	pgtest.Eventually(t, within, func() error {
		got := 0
		for _, x := range l.all()[start:] {
			if x.port == port {
				got++
			}
		}
		if got < n {
			return fmt.Errorf("%d of %d batches committed on :%d", got, n, port)
		}
		return nil
	})
}

// samplerOn checks that the sampler has a session on nu and none on any
// other node.
func samplerOn(ctx context.Context, c *patronicluster.Cluster, nu *patronicluster.Node) error {
	for _, n := range c.Nodes {
		conn, err := n.Connect(ctx, patronicluster.RoleAdmin)
		if err != nil {
			return err
		}
		var sessions int
		err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'throttled-sampler'`).Scan(&sessions)
		conn.Close(ctx)
		if err != nil {
			return err
		}
		switch {
		case n == nu && sessions == 0:
			return fmt.Errorf("no sampler session on the new primary %s", n.Name)
		case n != nu && sessions > 0:
			return fmt.Errorf("%d sampler sessions on %s, which is not the primary", sessions, n.Name)
		}
	}
	return nil
}

func auditRows(t *testing.T, ctx context.Context, c *patronicluster.Cluster) int {
	t.Helper()
	var n int
	err := poll(ctx, 20*time.Second, func() error {
		leader, err := c.Leader(ctx)
		if err != nil {
			return err
		}
		conn, err := leader.Connect(ctx, patronicluster.RoleOwner)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		return conn.QueryRow(ctx, `SELECT count(*) FROM throttled.audit`).Scan(&n)
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func pausedBy(p throttled.JobPacer, reason string) error {
	js := p.Status()
	st, r := js.State, js.Reason
	if st != status.JobPaused || !strings.Contains(r, reason) {
		return fmt.Errorf("held job is %s (%s); want paused by the hold %q", st, r, reason)
	}
	return nil
}

func leads(c *throttled.Client) error {
	if !c.Leader() {
		return errors.New("does not lead yet")
	}
	return nil
}

// next is the node after old, in order: the switchover's candidate.
func next(c *patronicluster.Cluster, old *patronicluster.Node) *patronicluster.Node {
	for i, n := range c.Nodes {
		if n == old {
			return c.Nodes[(i+1)%len(c.Nodes)]
		}
	}
	return c.Nodes[0]
}

func open(t *testing.T, opts throttled.Options) *throttled.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc, err := throttled.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	return tc
}

func mustConnect(t *testing.T, ctx context.Context, n *patronicluster.Node, role string) *pgx.Conn {
	t.Helper()
	conn, err := n.Connect(ctx, role)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// startCluster starts a Patroni cluster of n nodes, removed when the test
// ends. It skips only when Patroni or etcd is not installed.
func startCluster(t *testing.T, n int) *patronicluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := patronicluster.Start(ctx, patronicluster.Options{Nodes: n, Log: func(f string, a ...any) { t.Logf(f, a...) }})
	if errors.Is(err, patronicluster.ErrNoPatroni) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// report logs the measurements as a table and, with
// THROTTLED_FAILOVER_DOC set, writes them into that file between its
// markers.
func report(t *testing.T, ms []measurement) {
	t.Helper()
	var b strings.Builder
	b.WriteString("| event | from → to | seconds without work | job paused after (reason) | batches on the demoted primary | acknowledged batches lost |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, m := range ms {
		paused := "did not pause"
		if m.stopped > 0 {
			paused = fmt.Sprintf("%.2f s (`%s`)", m.stopped.Seconds(), m.code)
		}
		fmt.Fprintf(&b, "| %s | %s → %s | %.2f | %s | %d | %d |\n", m.event, m.from, m.to, m.idle.Seconds(), paused, m.onDemoted, m.lost)
	}
	t.Logf("\n%s", b.String())
	path := os.Getenv("THROTTLED_FAILOVER_DOC")
	if path == "" {
		return
	}
	if err := writeBetweenMarkers(path, b.String()); err != nil {
		t.Fatal(err)
	}
}

// poll calls check until it returns nil or within passes.
func poll(ctx context.Context, within time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return pgcluster.Poll(ctx, 100*time.Millisecond, func() (bool, error) {
		if err := check(); err != nil {
			return false, err
		}
		return true, nil
	})
}

// Markers around the generated part of docs/FAILOVER.md.
const (
	beginMarker = "<!-- failover:begin (generated by make failover; do not edit) -->"
	endMarker   = "<!-- failover:end -->"
)

// writeBetweenMarkers replaces what lies between the markers in the file
// at path (relative to the module's root) with table.
func writeBetweenMarkers(path, table string) error {
	if !filepath.IsAbs(path) {
		root, err := moduleRoot()
		if err != nil {
			return err
		}
		path = filepath.Join(root, path)
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	before, rest, ok1 := strings.Cut(string(doc), beginMarker)
	_, after, ok2 := strings.Cut(rest, endMarker)
	if !ok1 || !ok2 {
		return fmt.Errorf("%s: markers %q and %q not found", path, beginMarker, endMarker)
	}
	out := before + beginMarker + "\n" + table + endMarker + after
	return os.WriteFile(path, []byte(out), 0o644)
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
