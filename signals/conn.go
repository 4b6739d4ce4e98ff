package signals

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// SamplerAppName is the application_name of the sampler's own sessions.
// It does not start with [JobAppPrefix], so the sampler never counts as
// background work.
const SamplerAppName = "throttled-sampler"

// Reconnect backoff: the first retry after a failure waits about
// reconnectBase, each further one twice as long, up to reconnectMax, with
// jitter so many samplers do not reconnect in step.
const (
	reconnectBase = 250 * time.Millisecond
	reconnectMax  = 2 * time.Second
)

// seesSessionsSQL is the one rule for whether the sampler's role can see
// other users' sessions in pg_stat_activity and pg_stat_replication: the
// privileges of pg_read_all_stats (part of pg_monitor). Without them those
// rows read with a NULL state and would count as idle. It is checked at
// connect and again on every tick, in the tick's own statements, so a
// grant revoked mid-run fails the signals rather than zeroing them.
const seesSessionsSQL = `pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')`

type serverKind int

const (
	kindPrimary serverKind = iota
	kindReplica
	// kindPgBouncer is PgBouncer's admin console (pgbouncer.go): no
	// PostgreSQL checks, none of their session settings.
	kindPgBouncer
)

func (k serverKind) String() string {
	switch k {
	case kindPrimary:
		return "primary"
	case kindPgBouncer:
		return "pgbouncer"
	}
	return "replica"
}

// server is one long-lived sampling connection. It is owned by one
// goroutine at a time.
type server struct {
	kind           serverKind
	cfg            *pgx.ConnConfig
	addr           string // host:port, safe to log (no credentials)
	timeout        time.Duration
	allowSuperuser bool
	log            hclog.Logger

	conn     *pgx.Conn
	failures int
	retryAt  time.Time
	lastErr  error
	// role is the sampling role, learnt at connect.
	role string
	// grantLost is set while ticks find the role without
	// pg_read_all_stats, so the loss and the recovery are logged once.
	grantLost bool
	// replicaName is, for a replica, its name as the primary knows it,
	// learnt at connect.
	replicaName string
	// primary is, for the primary, the server this connection reached,
	// learnt at connect.
	primary Primary
}

func newServer(kind serverKind, dsn string, timeout time.Duration, allowSuperuser bool, log hclog.Logger) (*server, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgconn redacts the password from parse errors.
		return nil, err
	}
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	cfg.ConnectTimeout = timeout
	if kind == kindPgBouncer {
		pgbouncerParams(cfg)
		return &server{kind: kind, cfg: cfg, addr: addr, timeout: timeout, role: cfg.User,
			log: log.With("server", kind.String(), "addr", addr)}, nil
	}
	// The server cancels a statement at 3/4 of the timeout, keeping the
	// connection; the client deadline at the full timeout catches a server
	// that cannot even do that (hung), at the price of the connection.
	cfg.RuntimeParams["statement_timeout"] = strconv.FormatInt(max(1, (timeout*3/4).Milliseconds()), 10)
	cfg.RuntimeParams["lock_timeout"] = cfg.RuntimeParams["statement_timeout"]
	cfg.RuntimeParams["application_name"] = SamplerAppName
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	if err := checkRoleNotReadOnly(&cfg.Config, dsn, kind); err != nil {
		return nil, err
	}
	return &server{
		kind: kind, cfg: cfg, addr: addr, timeout: timeout, allowSuperuser: allowSuperuser,
		log: log.With("server", kind.String(), "addr", addr),
	}, nil
}

// ensure makes sure a checked connection is open, connecting when none is
// and a reconnect is due. Reconnects are paced by a jittered exponential
// backoff.
func (s *server) ensure(ctx context.Context, now time.Time) error {
	return s.ensureWithin(ctx, now, s.timeout)
}

// StartTimeout bounds the first connection, at start: a one-off check off
// the sampling path, where a loaded host's TLS or SCRAM exchange may take
// longer than a sampling tick may wait. A caller's earlier deadline still
// wins.
const StartTimeout = 5 * time.Second

// ensureWithin is ensure with its own bound on connecting.
func (s *server) ensureWithin(ctx context.Context, now time.Time, timeout time.Duration) error {
	if s.conn != nil && !s.conn.IsClosed() {
		return nil
	}
	s.conn = nil
	if now.Before(s.retryAt) {
		return fmt.Errorf("%w to %s %s (next attempt in %s): %w", ErrNotConnected, s.kind, s.addr,
			s.retryAt.Sub(now).Round(time.Millisecond), s.lastErr)
	}
	started := time.Now()
	conn, err := s.connect(ctx, timeout)
	if err != nil {
		s.failures++
		d := min(reconnectMax, reconnectBase<<min(s.failures-1, 8))
		// The wait counts from when the attempt gave up, not from when it
		// began: a hung server's attempt lasts the whole timeout, and the
		// next must still be paced after it.
		s.retryAt = now.Add(time.Since(started) + d/2 + rand.N(d/2+1))
		s.lastErr = err
		return err
	}
	if s.failures > 0 {
		s.log.Info("reconnected", "after_failures", s.failures)
	} else {
		s.log.Debug("connected")
	}
	s.conn, s.failures, s.lastErr = conn, 0, nil
	return nil
}

// connect opens a connection and checks that it may sample: the role can
// read other sessions, is not a superuser (unless allowed), and the
// server is the kind expected.
func (s *server) connect(ctx context.Context, timeout time.Duration) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg := s.cfg
	if timeout != cfg.ConnectTimeout {
		cfg = cfg.Copy()
		cfg.ConnectTimeout = timeout
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		if s.kind == kindPgBouncer && pgbouncerRefused(err) {
			return nil, s.pgbouncerAccessError(err)
		}
		return nil, fmt.Errorf("%w: connect to %s %s: %w", ErrUnreachable, s.kind, s.addr, classify(err, timeout))
	}
	if err := s.check(ctx, conn); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

func (s *server) check(ctx context.Context, conn *pgx.Conn) error {
	if s.kind == kindPgBouncer {
		return s.checkPgBouncer(ctx, conn)
	}
	var role string
	var super, readStats, inRecovery bool
	err := conn.QueryRow(ctx, `SELECT current_user::text, r.rolsuper, `+seesSessionsSQL+`, pg_is_in_recovery()
		FROM pg_roles r WHERE r.rolname = current_user`).Scan(&role, &super, &readStats, &inRecovery)
	if err != nil {
		return fmt.Errorf("check role on %s %s: %w", s.kind, s.addr, classify(err, s.timeout))
	}
	s.role = role
	switch {
	case super && !s.allowSuperuser:
		return fmt.Errorf("%s %s as %q: %w", s.kind, s.addr, role, ErrSuperuser)
	case !readStats:
		return &GrantError{Role: role}
	case s.kind == kindPrimary && inRecovery:
		return fmt.Errorf("%w: the primary DSN points at %s, which is in recovery (a replica)", ErrWrongServer, s.addr)
	case s.kind == kindReplica && !inRecovery:
		return fmt.Errorf("%w: a replica DSN points at %s, which is not in recovery (a primary)", ErrWrongServer, s.addr)
	}
	if s.kind == kindReplica {
		s.replicaName = s.discoverReplicaName(ctx, conn)
	}
	if s.kind == kindPrimary {
		var p Primary
		if err := conn.QueryRow(ctx, primarySQL).Scan(&p.Addr, &p.Timeline); err != nil {
			return fmt.Errorf("identify primary %s: %w", s.addr, classify(err, s.timeout))
		}
		s.primary = p
	}
	return nil
}

// discoverReplicaName names a replica as the primary does: its slot name,
// else the application_name it streams with, else cluster_name (the
// walreceiver's default application_name), else its address. Reading the
// settings needs pg_read_all_settings (part of pg_monitor); without it the
// address is used.
func (s *server) discoverReplicaName(ctx context.Context, conn *pgx.Conn) string {
	var slot, conninfo, cluster string
	err := conn.QueryRow(ctx, `SELECT current_setting('primary_slot_name'),
		current_setting('primary_conninfo'), current_setting('cluster_name')`).Scan(&slot, &conninfo, &cluster)
	if err != nil {
		s.log.Warn("cannot read replica settings; naming the replica by address", "error", err)
		return s.addr
	}
	if slot != "" {
		return slot
	}
	if app, ok := conninfoValue(conninfo, "application_name"); ok && app != "" {
		return app
	}
	if cluster != "" {
		return cluster
	}
	return "walreceiver"
}

// CheckReplica connects to the replica at dsn as a [Poller] does (its
// role, its checks, connecting within timeout), then closes the
// connection. It returns the replica's name as the Poller names it: its
// slot name, else the application_name it streams with, else its
// cluster_name (its address, for a role that cannot read settings). It
// fails as [Poller.Connect] does: [ErrUnreachable],
// [ErrWrongServer] for a server not in recovery, a [GrantError], or
// [ErrSuperuser].
func CheckReplica(ctx context.Context, dsn string, timeout time.Duration) (string, error) {
	s, err := checkServer(ctx, kindReplica, dsn, timeout)
	if err != nil {
		return "", err
	}
	return s.replicaName, nil
}

// CheckPrimary connects to the primary at dsn as a [Poller] does and
// closes the connection: the same checks a sampler runs at start (the
// role sees other sessions, is no superuser, and the server is not in
// recovery), so a configuration check refuses what sampling would.
func CheckPrimary(ctx context.Context, dsn string, timeout time.Duration) error {
	_, err := checkServer(ctx, kindPrimary, dsn, timeout)
	return err
}

// checkServer connects to dsn as a sampler of kind would, runs the
// connect-time checks, and closes the connection.
func checkServer(ctx context.Context, kind serverKind, dsn string, timeout time.Duration) (*server, error) {
	s, err := newServer(kind, dsn, timeout, false, hclog.NewNullLogger())
	if err != nil {
		return nil, err
	}
	conn, err := s.connect(ctx, timeout)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	_ = conn.Close(cctx)
	return s, nil
}

// do runs f on the connection under the query timeout. A failure that
// closed the connection (a client deadline does) makes the next call
// reconnect.
func (s *server) do(ctx context.Context, now time.Time, f func(context.Context, *pgx.Conn) error) error {
	if err := s.ensure(ctx, now); err != nil {
		if !errors.Is(err, ErrNotConnected) {
			s.log.Warn("connect failed", "error", err, "failures", s.failures)
		}
		return err
	}
	qctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	err := f(qctx, s.conn)
	var grant *GrantError
	switch {
	case errors.As(err, &grant):
		if !s.grantLost {
			s.log.Error("sampler role lost its grant; every signal of this server fails until it is back", "error", err)
		}
		s.grantLost = true
	case err == nil && s.grantLost:
		s.log.Info("sampler role has its grant back", "role", s.role)
		s.grantLost = false
	}
	if err == nil {
		return nil
	}
	err = fmt.Errorf("sample %s %s: %w", s.kind, s.addr, classify(err, s.timeout))
	if s.conn.IsClosed() {
		s.log.Warn("connection lost", "error", err)
		s.conn = nil
	}
	return err
}

func (s *server) close() {
	if s.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		defer cancel()
		_ = s.conn.Close(ctx)
		s.conn = nil
	}
}

// classify marks deadline and statement-timeout failures with ErrTimeout.
func classify(err error, timeout time.Duration) error {
	var pgErr *pgconn.PgError
	if errors.Is(err, ErrTimeout) {
		return err // marked already, with the bound that applied
	}
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) ||
		(errors.As(err, &pgErr) && pgErr.Code == "57014") {
		return fmt.Errorf("%w after %s: %w", ErrTimeout, timeout, err)
	}
	return err
}
