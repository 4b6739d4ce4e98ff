package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// connectAs opens a connection to s as role with the given
// application_name.
func (s *Server) connectAs(ctx context.Context, role, appName string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(s.DSN(role))
	if err != nil {
		return nil, err
	}
	if appName != "" {
		cfg.RuntimeParams["application_name"] = appName
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return pgx.ConnectConfig(ctx, cfg)
}

// waitActivity polls the primary until count(*) of pg_stat_activity rows
// matching where (with args) reaches want.
func (c *Cluster) waitActivity(ctx context.Context, want int, where string, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.pollPrimary(ctx, where, func(conn *pgx.Conn) (bool, error) {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE "+where, args...).Scan(&n)
		return n >= want, err
	})
}

// Sessions is a set of fault sessions running on the primary. Stop ends
// them and waits until they are gone.
type Sessions struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []*pgx.Conn
	errs   []error
	stop   func()
}

// Stop cancels every session's statement, closes the sessions and waits
// for them. It returns the first unexpected error a session saw. It is
// safe to call more than once.
func (s *Sessions) Stop() error {
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
	for _, c := range s.conns {
		c.Close(context.Background())
	}
	s.conns = nil
	return errors.Join(s.errs...)
}

// Len is the number of sessions opened.
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *Sessions) add(c *pgx.Conn) {
	s.mu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
}

// run runs query on conn in a goroutine; cancellation by Stop is expected
// and not reported.
func (s *Sessions) run(ctx context.Context, conn *pgx.Conn, query string) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_, err := conn.Exec(ctx, query)
		s.record(ctx, err)
	}()
}

// record keeps err for Stop unless it is nil or ctx has ended (Stop
// cancels the sessions' statements).
func (s *Sessions) record(ctx context.Context, err error) {
	if err != nil && ctx.Err() == nil {
		s.mu.Lock()
		s.errs = append(s.errs, err)
		s.mu.Unlock()
	}
}

// CPUAppName is the application_name of CPULoad sessions unless the
// caller gives another.
const CPUAppName = "fault_cpu"

// CPULoad starts n sessions on the primary, each spinning in PL/pgSQL
// busy loops (on CPU, no wait event) for d, as the plain role with the
// given application_name (CPUAppName when empty). It returns once all n
// are active. Stop ends them early.
//
// Each session spins in statements of at most cpuSpinSlice, one after
// another, so that none holds a snapshot for long: one statement spinning
// for d would pin the xmin horizon, and the foreground's updates would then
// walk ever longer version chains. That is a different fault (a held
// horizon), and it grows the foreground's cost over the run instead of
// taking a fixed share of the CPU.
func (c *Cluster) CPULoad(ctx context.Context, n int, d time.Duration, appName string) (*Sessions, error) {
	if appName == "" {
		appName = CPUAppName
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s := &Sessions{cancel: cancel}
	end := time.Now().Add(d)
	for range n {
		conn, err := c.Primary.connectAs(ctx, RolePlain, appName)
		if err != nil {
			s.Stop()
			return nil, fmt.Errorf("pgcluster: cpu load session: %w", err)
		}
		s.add(conn)
		s.wg.Go(func() {
			for {
				left := time.Until(end)
				if left <= 0 || runCtx.Err() != nil {
					return
				}
				if _, err := conn.Exec(runCtx, spinSQL(min(left, cpuSpinSlice))); err != nil {
					s.record(runCtx, err)
					return
				}
			}
		})
	}
	if err := c.waitActivity(ctx, n, "application_name = $1 AND state = 'active' AND wait_event IS NULL", appName); err != nil {
		s.Stop()
		return nil, fmt.Errorf("pgcluster: cpu load did not start: %w", err)
	}
	return s, nil
}

// cpuSpinSlice is the longest statement a CPULoad session runs.
const cpuSpinSlice = 200 * time.Millisecond

// spinSQL is one statement that spins on CPU for d.
func spinSQL(d time.Duration) string {
	return fmt.Sprintf(`DO $$
DECLARE stop_at timestamptz := clock_timestamp() + interval '%d microseconds';
BEGIN
  WHILE clock_timestamp() < stop_at LOOP END LOOP;
END $$`, max(1, d.Microseconds()))
}

// LockWaits opens one session holding an ACCESS EXCLUSIVE lock on a table
// and n sessions blocked reading it (state active, wait_event_type Lock).
// It returns once all n wait. Stop releases the lock and ends them.
func (c *Cluster) LockWaits(ctx context.Context, n int) (*Sessions, error) {
	const appName = "fault_lock"
	runCtx, cancel := context.WithCancel(context.Background())
	s := &Sessions{cancel: cancel}
	holder, err := c.Primary.connectAs(ctx, RolePlain, appName+"_holder")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: lock holder: %w", err)
	}
	tx, err := holder.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, "LOCK TABLE throttled_fault_lock IN ACCESS EXCLUSIVE MODE")
	}
	if err != nil {
		holder.Close(context.Background())
		return nil, fmt.Errorf("pgcluster: take lock: %w", err)
	}
	// The holder goes first in stop order: rolling back releases the
	// waiters before their connections are closed.
	s.stop = func() {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		_ = tx.Rollback(rctx)
		holder.Close(rctx)
	}
	for range n {
		conn, err := c.Primary.connectAs(ctx, RolePlain, appName)
		if err != nil {
			s.Stop()
			return nil, fmt.Errorf("pgcluster: lock waiter: %w", err)
		}
		s.add(conn)
		s.run(runCtx, conn, "SELECT count(*) FROM throttled_fault_lock")
	}
	if err := c.waitActivity(ctx, n, "application_name = $1 AND wait_event_type = 'Lock'", appName); err != nil {
		s.Stop()
		return nil, fmt.Errorf("pgcluster: lock waits did not start: %w", err)
	}
	return s, nil
}

// OpenConnections opens up to n idle connections to the primary as the
// plain role. It stops early, without error, when the server refuses with
// SQLSTATE 53300 (too many connections), so n larger than the limit
// exhausts it. Any other failure is an error.
func (c *Cluster) OpenConnections(ctx context.Context, n int) (*Sessions, error) {
	s := &Sessions{cancel: func() {}}
	for range n {
		conn, err := c.Primary.connectAs(ctx, RolePlain, "fault_conn")
		if err != nil {
			if TooManyConnections(err) {
				return s, nil
			}
			s.Stop()
			return nil, fmt.Errorf("pgcluster: open connection %d: %w", s.Len()+1, err)
		}
		s.add(conn)
	}
	return s, nil
}

// TooManyConnections reports whether err is SQLSTATE 53300.
func TooManyConnections(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53300"
}

// PauseReplay pauses WAL replay on the replica. Lag then grows with every
// write on the primary (see WriteWAL). ResumeReplay undoes it.
func (c *Cluster) PauseReplay(ctx context.Context) error {
	return c.onReplica(ctx, "SELECT pg_wal_replay_pause()")
}

// ResumeReplay resumes WAL replay on the replica.
func (c *Cluster) ResumeReplay(ctx context.Context) error {
	return c.onReplica(ctx, "SELECT pg_wal_replay_resume()")
}

// SetReplicaFeedback turns the replica's hot_standby_feedback on or off
// (on is the cluster's default) and reloads its configuration. With replay
// paused and feedback on, the replica reports the xmin of the last
// transaction it replayed, and the primary's vacuum keeps every row
// version since then: the paused replica pins the horizon as a long
// transaction would.
func (c *Cluster) SetReplicaFeedback(ctx context.Context, on bool) error {
	v := "off"
	if on {
		v = "on"
	}
	if err := c.onReplica(ctx, "ALTER SYSTEM SET hot_standby_feedback = "+v); err != nil {
		return err
	}
	return c.onReplica(ctx, "SELECT pg_reload_conf()")
}

func (c *Cluster) onReplica(ctx context.Context, q string) error {
	conn, err := c.Replica.Connect(ctx, RoleAdmin)
	if err != nil {
		return fmt.Errorf("pgcluster: connect to replica: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("pgcluster: %s: %w", q, err)
	}
	return nil
}

// WriteWAL inserts rows on the primary totalling about n bytes of WAL.
func (c *Cluster) WriteWAL(ctx context.Context, n int) error {
	conn, err := c.Primary.Connect(ctx, RoleAdmin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rows := max(1, n/1100)
	_, err = conn.Exec(ctx, "INSERT INTO throttled_fault_wal (pad) SELECT repeat('x', 1000) FROM generate_series(1, $1)", rows)
	if err != nil {
		return fmt.Errorf("pgcluster: write wal: %w", err)
	}
	return nil
}

// StopReplica shuts the replica down (fast mode) and waits until the
// primary's walsender for it is gone.
func (c *Cluster) StopReplica(ctx context.Context) error {
	if err := c.Replica.stop(30 * time.Second); err != nil {
		return err
	}
	return c.pollPrimary(ctx, "walsender gone", func(conn *pgx.Conn) (bool, error) {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE application_name = $1", ReplicaName).Scan(&n)
		return n == 0, err
	})
}

// StartReplica starts a stopped replica and waits until it streams.
func (c *Cluster) StartReplica(ctx context.Context) error {
	if c.Replica.Running() {
		return nil
	}
	if err := c.Replica.start(ctx); err != nil {
		return err
	}
	return c.WaitStreaming(ctx)
}

// RestartPrimary shuts the primary down (fast mode: every session is
// disconnected, open transactions roll back), starts it again and waits
// until the replica streams from it once more.
func (c *Cluster) RestartPrimary(ctx context.Context) error {
	if err := c.Primary.stop(30 * time.Second); err != nil {
		return err
	}
	if err := c.Primary.start(ctx); err != nil {
		return err
	}
	return c.WaitStreaming(ctx)
}

// HangPrimary stops the primary's postmaster and every process it forked
// (backends, walsenders, auxiliary processes) with SIGSTOP: the server accepts TCP connections (the kernel does) but
// answers nothing. ResumePrimary undoes it; Stop does too.
func (c *Cluster) HangPrimary() error {
	if !c.Primary.Running() {
		return errors.New("pgcluster: primary is not running")
	}
	c.Primary.signalGroup(syscall.SIGSTOP)
	return nil
}

// ResumePrimary sends SIGCONT to the primary's postmaster and children.
func (c *Cluster) ResumePrimary() {
	c.Primary.signalGroup(syscall.SIGCONT)
}

// LockTable opens one session that takes a lock on table in mode (a LOCK
// TABLE mode such as "SHARE" or "ACCESS EXCLUSIVE") inside a transaction,
// as the admin role, and holds it until Stop: every statement needing a
// conflicting lock on table waits meanwhile. It returns once the lock is
// held.
func (c *Cluster) LockTable(ctx context.Context, table, mode string) (*Sessions, error) {
	switch mode {
	case "ACCESS SHARE", "ROW SHARE", "ROW EXCLUSIVE", "SHARE UPDATE EXCLUSIVE", "SHARE",
		"SHARE ROW EXCLUSIVE", "EXCLUSIVE", "ACCESS EXCLUSIVE":
	default:
		return nil, fmt.Errorf("pgcluster: lock table: unknown mode %q", mode)
	}
	conn, err := c.Primary.connectAs(ctx, RoleAdmin, "fault_lock_table")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: lock table session: %w", err)
	}
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{table}.Sanitize()+" IN "+mode+" MODE")
	}
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("pgcluster: lock table %s: %w", table, err)
	}
	s := &Sessions{cancel: func() {}}
	s.stop = func() {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		_ = tx.Rollback(rctx)
	}
	s.add(conn)
	return s, nil
}

// CrashAndPromote kills the primary's postmaster and every process it
// forked (SIGKILL: no checkpoint, no goodbye to any client), then promotes
// the replica and waits until it takes writes. The pair is a pair no
// more: Primary stays down and Replica is the primary, so a test that
// calls it starts a cluster of its own rather than the package's shared
// one (pgtest.Cluster).
func (c *Cluster) CrashAndPromote(ctx context.Context) error {
	if !c.Primary.Running() {
		return errors.New("pgcluster: primary is not running")
	}
	c.Primary.signalGroup(syscall.SIGKILL)
	select {
	case <-c.Primary.exited:
		c.Primary.cmd = nil
	case <-ctx.Done():
		return fmt.Errorf("pgcluster: primary did not exit after SIGKILL: %w", ctx.Err())
	}
	if err := c.onReplica(ctx, "SELECT pg_promote(true, 60)"); err != nil {
		return err
	}
	return Poll(ctx, 50*time.Millisecond, func() (bool, error) {
		conn, err := c.Replica.Connect(ctx, RoleAdmin)
		if err != nil {
			return false, nil
		}
		defer conn.Close(context.Background())
		var recovering bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering); err != nil {
			return false, nil
		}
		return !recovering, nil
	})
}
