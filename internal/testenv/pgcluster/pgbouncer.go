package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoPgBouncer reports that no pgbouncer binary was found. `make deps`
// installs it (scripts/ensure-pgbouncer); a bare `go test` does not.
var ErrNoPgBouncer = errors.New("pgcluster: no pgbouncer binary found; run `make deps` or `apt-get install pgbouncer`, or set THROTTLED_PGBOUNCER")

// PgBouncerDatabase is the one pooled database of a throwaway PgBouncer:
// the primary's database "postgres", under the same name.
const PgBouncerDatabase = "postgres"

// PgBouncerAdminDatabase is PgBouncer's admin console, the pseudo-database
// that answers SHOW POOLS.
const PgBouncerAdminDatabase = "pgbouncer"

// DefaultPgBouncerPoolSize is a throwaway PgBouncer's default_pool_size:
// small, so a test fills a pool with a handful of sessions.
const DefaultPgBouncerPoolSize = 4

// PgBouncerOptions tune a throwaway PgBouncer. The zero value is ready to
// use.
type PgBouncerOptions struct {
	// Binary is the pgbouncer executable. Defaults to FindPgBouncer().
	Binary string
	// PoolSize is default_pool_size, the server connections one pool
	// (database and user) may open. Defaults to DefaultPgBouncerPoolSize.
	PoolSize int
	// StartTimeout bounds the start, until the admin console answers.
	// Defaults to 30s.
	StartTimeout time.Duration
	// Config are extra lines for the [pgbouncer] section, such as
	// "reserve_pool_size = 2".
	Config []string
}

// PgBouncer is a throwaway PgBouncer in front of a cluster's primary, on
// a loopback port, pooling in transaction mode. Clients authenticate with
// the cluster's roles and passwords (SCRAM, from an auth_file of its own);
// RoleAdmin is in admin_users and RoleMonitor in stats_users, so the
// monitoring role reads the admin console as a sampler would.
type PgBouncer struct {
	// Port is the loopback TCP port it listens on.
	Port int
	// PoolSize is its default_pool_size.
	PoolSize int

	c      *Cluster
	dir    string
	log    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// FindPgBouncer returns the path of the pgbouncer binary: the environment
// variable THROTTLED_PGBOUNCER when set, else pgbouncer on PATH, else
// /usr/sbin/pgbouncer (where Debian puts it, often off a user's PATH).
func FindPgBouncer() (string, error) {
	if p := os.Getenv("THROTTLED_PGBOUNCER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("pgcluster: THROTTLED_PGBOUNCER=%q: %w", p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", ErrNoPgBouncer
}

// StartPgBouncer starts a throwaway PgBouncer in front of c's primary, in
// a temporary directory of its own, and returns once its admin console
// answers, or fails within opts.StartTimeout. Stop it with
// [PgBouncer.Stop]; a crashed test does not leak it (it dies with the
// test process).
func (c *Cluster) StartPgBouncer(ctx context.Context, opts PgBouncerOptions) (_ *PgBouncer, err error) {
	if opts.Binary == "" {
		if opts.Binary, err = FindPgBouncer(); err != nil {
			return nil, err
		}
	}
	if opts.PoolSize <= 0 {
		opts.PoolSize = DefaultPgBouncerPoolSize
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "throttled-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: pgbouncer temp dir: %w", err)
	}
	b := &PgBouncer{Port: ports[0], PoolSize: opts.PoolSize, c: c, dir: dir, log: filepath.Join(dir, "pgbouncer.log")}
	defer func() {
		if err != nil {
			b.Stop()
		}
	}()
	// PgBouncer refuses to run as root: it runs as the servers' account,
	// which must own its directory (pid file) and read its files.
	if err := os.Chown(dir, int(c.user.uid), int(c.user.gid)); err != nil {
		return nil, fmt.Errorf("pgcluster: pgbouncer temp dir: %w", err)
	}
	ini := filepath.Join(dir, "pgbouncer.ini")
	if err := b.writeOwned("userlist.txt", b.authFile()); err != nil {
		return nil, err
	}
	if err := b.writeOwned("pgbouncer.ini", b.config(opts)); err != nil {
		return nil, err
	}
	if err := b.start(opts.Binary, ini); err != nil {
		return nil, err
	}
	if err := b.waitReady(ctx, opts.StartTimeout); err != nil {
		return nil, err
	}
	c.opts.Log("pgcluster: pgbouncer :%d in front of the primary :%d (pool size %d)", b.Port, c.Primary.Port, b.PoolSize)
	return b, nil
}

// authFile lists every role of the cluster with its password in plain
// text, which PgBouncer needs both to check a client's SCRAM exchange and
// to log in to the primary as that client. The file is the servers'
// account's alone (0600) and goes with the directory. Names and
// passwords (hex) hold no double quote, the one character the format
// would need escaped.
func (b *PgBouncer) authFile() string {
	var lines []string
	for _, r := range []string{RoleAdmin, RoleMonitor, RolePlain} {
		lines = append(lines, fmt.Sprintf(`"%s" "%s"`, r, b.c.passwords[r]))
	}
	return strings.Join(lines, "\n") + "\n"
}

func (b *PgBouncer) config(opts PgBouncerOptions) string {
	lines := []string{
		"[databases]",
		fmt.Sprintf("%s = host=127.0.0.1 port=%d dbname=%s", PgBouncerDatabase, b.c.Primary.Port, PgBouncerDatabase),
		"",
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		fmt.Sprintf("listen_port = %d", b.Port),
		"unix_socket_dir =",
		"auth_type = scram-sha-256",
		"auth_file = " + filepath.Join(b.dir, "userlist.txt"),
		"pidfile = " + filepath.Join(b.dir, "pgbouncer.pid"),
		"pool_mode = transaction",
		fmt.Sprintf("default_pool_size = %d", b.PoolSize),
		"min_pool_size = 0",
		"reserve_pool_size = 0",
		"max_client_conn = 100",
		"admin_users = " + RoleAdmin,
		"stats_users = " + RoleMonitor,
		// A failed server login is retried after this, not the default 15 s,
		// so a test that hung the primary sees the pool come back quickly.
		"server_login_retry = 1",
		"syslog = 0",
	}
	return strings.Join(append(lines, opts.Config...), "\n") + "\n"
}

// writeOwned writes name in b's directory, readable only by the servers'
// account.
func (b *PgBouncer) writeOwned(name, text string) error {
	p := filepath.Join(b.dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		return fmt.Errorf("pgcluster: pgbouncer %s: %w", name, err)
	}
	if err := os.Chown(p, int(b.c.user.uid), int(b.c.user.gid)); err != nil {
		return fmt.Errorf("pgcluster: pgbouncer %s: %w", name, err)
	}
	return nil
}

func (b *PgBouncer) start(bin, ini string) error {
	logf, err := os.OpenFile(b.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgcluster: pgbouncer log: %w", err)
	}
	cmd := exec.Command(bin, ini)
	cmd.Dir = b.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig keeps a crashed test from leaking it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.c.user.cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("pgcluster: start pgbouncer: %w", err)
	}
	b.cmd = cmd
	b.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(b.exited)
	}()
	return nil
}

// waitReady polls the admin console until it answers SHOW VERSION, the
// process exits (a configuration it refuses), or timeout passes.
func (b *PgBouncer) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	go func() {
		select {
		case <-b.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := Poll(ctx, 50*time.Millisecond, func() (bool, error) {
		err := b.answers(ctx)
		return err == nil, err
	})
	if err != nil && !b.Running() {
		return fmt.Errorf("pgcluster: pgbouncer :%d exited before it answered:\n%s", b.Port, Tail(b.log, 20))
	}
	if err != nil {
		return fmt.Errorf("pgcluster: pgbouncer :%d did not answer: %w\n%s", b.Port, err, Tail(b.log, 20))
	}
	return nil
}

// answers runs SHOW VERSION on the admin console as RoleAdmin, bounded by
// ctx and a second.
func (b *PgBouncer) answers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.AdminDSN(RoleAdmin))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var version string
	return conn.QueryRow(ctx, "SHOW VERSION").Scan(&version)
}

// DSN returns a connection URL for role to the pooled database through
// b, with the role's password. It asks pgx for the simple query protocol
// (default_query_exec_mode=simple_protocol): pgx's default prepares and
// caches statements by name, which transaction pooling breaks, as it
// hands each transaction whichever server connection is free.
func (b *PgBouncer) DSN(role string) string { return b.dsn(role, PgBouncerDatabase) }

// AdminDSN returns a connection URL for role to b's admin console
// (dbname=pgbouncer), with the role's password and the simple query
// protocol, the only one the console speaks.
func (b *PgBouncer) AdminDSN(role string) string { return b.dsn(role, PgBouncerAdminDatabase) }

func (b *PgBouncer) dsn(role, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(role, b.c.passwords[role]),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable&connect_timeout=5&default_query_exec_mode=simple_protocol",
	}
	return u.String()
}

// Connect opens a connection to the pooled database through b as role,
// bounded by ctx and a 5 s timeout.
func (b *PgBouncer) Connect(ctx context.Context, role string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return pgx.Connect(ctx, b.DSN(role))
}

// Running reports whether the PgBouncer process is running.
func (b *PgBouncer) Running() bool {
	if b.cmd == nil {
		return false
	}
	select {
	case <-b.exited:
		return false
	default:
		return true
	}
}

// Hang stops the PgBouncer process with SIGSTOP: the kernel still accepts
// TCP connections on its port, but nothing answers. Resume undoes it;
// Stop does too.
func (b *PgBouncer) Hang() error {
	if !b.Running() {
		return errors.New("pgcluster: pgbouncer is not running")
	}
	return b.cmd.Process.Signal(syscall.SIGSTOP)
}

// Resume sends SIGCONT to a hung PgBouncer.
func (b *PgBouncer) Resume() {
	if b.Running() {
		_ = b.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Stop kills the PgBouncer process, waits for it to exit, and for the
// primary to end the backends of its server connections (so a test that
// counts the primary's sessions next does not see them leave), then
// removes its directory. Each wait is bounded; the whole takes a few
// seconds at most. It is safe to call more than once.
//
// A kill rather than a shutdown: a throwaway has nothing to flush, what
// SIGINT and SIGTERM mean changed across versions (from 1.23 on SIGTERM
// waits for every client to disconnect, which a test's own sessions would
// never do), and a killed PgBouncer is what a crashed one looks like to
// its clients, which is what tests of a stopped PgBouncer want.
func (b *PgBouncer) Stop() {
	if b.Running() {
		b.Resume()
		backends := b.serverPIDs()
		_ = b.cmd.Process.Signal(syscall.SIGKILL)
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-b.exited:
		case <-t.C:
			b.c.opts.Log("pgcluster: pgbouncer pid %d did not exit 10 s after SIGKILL", b.cmd.Process.Pid)
		}
		b.waitGone(backends)
	}
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
		b.dir = ""
	}
}

// serverPIDs returns the primary's backend pids of b's server
// connections (SHOW SERVERS' remote_pid), or none when the admin console
// does not answer within a second.
func (b *PgBouncer) serverPIDs() []int64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.AdminDSN(RoleAdmin))
	if err != nil {
		return nil
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SHOW SERVERS")
	if err != nil {
		return nil
	}
	servers, err := pgx.CollectRows(rows, pgx.RowToMap)
	if err != nil {
		return nil
	}
	var pids []int64
	for _, s := range servers {
		if pid, ok := s["remote_pid"].(int32); ok && pid > 0 {
			pids = append(pids, int64(pid))
		}
	}
	return pids
}

// waitGone polls the primary until none of pids is a backend, for 5 s at
// most: a backend ends when it reads the end of its client's socket, a
// moment after the kill.
func (b *PgBouncer) waitGone(pids []int64) {
	if len(pids) == 0 || !b.c.Primary.Running() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := b.c.Primary.Connect(ctx, RoleAdmin)
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	err = Poll(ctx, 20*time.Millisecond, func() (bool, error) {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)", pids).Scan(&n)
		return n == 0, err
	})
	if err != nil {
		b.c.opts.Log("pgcluster: backends of pgbouncer's server connections still there: %v", err)
	}
}
