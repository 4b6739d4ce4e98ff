// Package pgcluster starts a throwaway PostgreSQL primary with one
// streaming replica on loopback ports, and injects the faults throttled
// must survive: replica lag, CPU load, lock waits, connection exhaustion, a
// stopped replica and a hung primary. Tests use it through internal/pgtest;
// `throttled demo` uses it directly.
//
// The pair lives under one temporary directory and is removed by Stop. When
// the calling process is root, the servers run as a non-root account
// (PostgreSQL refuses root). Authentication over TCP is SCRAM with random
// per-cluster passwords, so DSNs carry real secrets.
package pgcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// Role names the harness creates on the primary (and so on the replica).
const (
	// RoleAdmin is the bootstrap superuser. Tests use it only to set up
	// and inject faults, never to sample.
	RoleAdmin = "postgres"
	// RoleMonitor is a plain login role granted pg_monitor: what the
	// sampler runs as.
	RoleMonitor = "throttled_monitor"
	// RolePlain is a login role without pg_monitor, for negative tests and
	// for fault sessions that must look like ordinary clients.
	RolePlain = "throttled_plain"
	// RoleReplication streams WAL to the replica.
	RoleReplication = "throttled_replicator"
)

// ReplicaName is the replica's application_name and physical slot name.
const ReplicaName = "replica1"

// MaxConnections is the primary's and replica's max_connections. Small,
// so exhausting it is quick.
const MaxConnections = 50

// SuperuserReservedConnections is superuser_reserved_connections.
const SuperuserReservedConnections = 3

// Options tune a cluster. The zero value is ready to use.
type Options struct {
	// BinDir holds initdb, postgres and pg_basebackup. Defaults to
	// FindBinDir().
	BinDir string
	// StartTimeout bounds each server start. Defaults to 60s.
	StartTimeout time.Duration
	// MaxConnections is max_connections. Defaults to the package's
	// MaxConnections (50).
	MaxConnections int
	// Log, when set, receives one line per harness step.
	Log func(format string, args ...any)
	// Config are extra postgresql.conf lines for the primary (and, as a
	// base backup copies them, the replica), such as "archive_mode = on".
	Config []string
}

// Cluster is a running primary and streaming replica. Its methods are safe
// for use by one goroutine at a time, except the fault helpers, which may
// run concurrently with each other.
type Cluster struct {
	Primary *Server
	Replica *Server

	opts      Options
	dir       string
	user      osUser
	passwords map[string]string
}

// Server is one postmaster of the cluster.
type Server struct {
	// Name is "primary" or the replica's name.
	Name string
	// Port is the loopback TCP port.
	Port int
	// DataDir is the data directory.
	DataDir string

	c   *Cluster
	cmd *exec.Cmd
	log string
	// exited is closed when the postmaster has exited.
	exited chan struct{}
}

// Start creates and starts a primary and a streaming replica, and waits
// until the replica streams from the primary's slot.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.BinDir == "" {
		if opts.BinDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 60 * time.Second
	}
	if opts.MaxConnections == 0 {
		opts.MaxConnections = MaxConnections
	}
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	u, err := serverUser()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "throttled-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: temp dir: %w", err)
	}
	c := &Cluster{opts: opts, dir: dir, user: u, passwords: map[string]string{}}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	for _, r := range []string{RoleAdmin, RoleMonitor, RolePlain, RoleReplication} {
		c.passwords[r] = RandomHex(16)
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	c.Primary = &Server{Name: "primary", Port: ports[0], DataDir: filepath.Join(dir, "primary"), c: c, log: filepath.Join(dir, "primary.log")}
	c.Replica = &Server{Name: ReplicaName, Port: ports[1], DataDir: filepath.Join(dir, ReplicaName), c: c, log: filepath.Join(dir, ReplicaName+".log")}

	start := time.Now()
	if err := c.initPrimary(ctx); err != nil {
		return nil, err
	}
	if err := c.Primary.start(ctx); err != nil {
		return nil, err
	}
	if err := c.bootstrap(ctx); err != nil {
		return nil, err
	}
	if err := c.initReplica(ctx); err != nil {
		return nil, err
	}
	if err := c.Replica.start(ctx); err != nil {
		return nil, err
	}
	if err := c.WaitStreaming(ctx); err != nil {
		return nil, err
	}
	opts.Log("pgcluster: primary :%d and replica :%d streaming after %s", c.Primary.Port, c.Replica.Port, time.Since(start).Round(time.Millisecond))
	return c, nil
}

// Dir is the cluster's temporary directory.
func (c *Cluster) Dir() string { return c.dir }

// DSN returns a connection URL for role on server s, with the role's
// password, sslmode disabled and a 5 s connect timeout.
func (s *Server) DSN(role string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(role, s.c.passwords[role]),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)),
		Path:     "/postgres",
		RawQuery: "sslmode=disable&connect_timeout=5",
	}
	return u.String()
}

// Password returns the password of role, so tests can check it never
// reaches a log.
func (c *Cluster) Password(role string) string { return c.passwords[role] }

// Connect opens a connection to s as role, bounded by ctx and a 5 s
// timeout.
func (s *Server) Connect(ctx context.Context, role string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return pgx.Connect(ctx, s.DSN(role))
}

// Stop stops both servers (resuming them first if they were hung) and
// removes the temporary directory. It is safe to call more than once.
func (c *Cluster) Stop() {
	for _, s := range []*Server{c.Replica, c.Primary} {
		if s != nil {
			s.signalGroup(syscall.SIGCONT)
			_ = s.stop(30 * time.Second)
		}
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

func (c *Cluster) initPrimary(ctx context.Context) error {
	s := c.Primary
	if err := c.mkdirOwned(s.DataDir, 0o700); err != nil {
		return err
	}
	pwfile := filepath.Join(c.dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(c.passwords[RoleAdmin]+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.Chown(pwfile, int(c.user.uid), int(c.user.gid)); err != nil {
		return err
	}
	defer os.Remove(pwfile)
	if err := c.run(ctx, nil, "initdb", "-D", s.DataDir, "-U", RoleAdmin, "--pwfile", pwfile,
		"--auth-local=scram-sha-256", "--auth-host=scram-sha-256", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		return err
	}
	conf := strings.Join([]string{
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = ''",
		fmt.Sprintf("max_connections = %d", c.opts.MaxConnections),
		fmt.Sprintf("superuser_reserved_connections = %d", SuperuserReservedConnections),
		"shared_buffers = 32MB",
		"wal_level = logical", // logical slots (test_decoding) for the slot-retention tests
		"max_wal_senders = 10",
		"max_replication_slots = 10",
		"wal_receiver_status_interval = 1s",
		"wal_sender_timeout = 10s",
		"wal_receiver_timeout = 10s",
		"hot_standby = on",
		"hot_standby_feedback = on",
		"max_prepared_transactions = 4", // a prepared transaction holding the xmin horizon, in the signals' tests
		"fsync = off",
		"full_page_writes = off",
		"synchronous_commit = off",
		"logging_collector = off",
		"log_min_messages = warning",
		"log_line_prefix = '%m [%p] %q%u@%d '",
		"",
	}, "\n") + strings.Join(c.opts.Config, "\n") + "\n"
	// initdb's pg_hba.conf already admits replication from 127.0.0.1 with
	// SCRAM, which is all the replica needs.
	return appendFile(filepath.Join(s.DataDir, "postgresql.conf"), conf)
}

func (c *Cluster) bootstrap(ctx context.Context) error {
	conn, err := c.Primary.Connect(ctx, RoleAdmin)
	if err != nil {
		return fmt.Errorf("pgcluster: connect to primary: %w", err)
	}
	defer conn.Close(context.Background())
	stmts := []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s' IN ROLE pg_monitor", RoleMonitor, c.passwords[RoleMonitor]),
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", RolePlain, c.passwords[RolePlain]),
		fmt.Sprintf("CREATE ROLE %s LOGIN REPLICATION PASSWORD '%s'", RoleReplication, c.passwords[RoleReplication]),
		"CREATE TABLE throttled_fault_lock (id int)",
		"CREATE TABLE throttled_fault_wal (id bigserial PRIMARY KEY, pad text)",
		fmt.Sprintf("GRANT SELECT, INSERT, UPDATE ON throttled_fault_lock, throttled_fault_wal TO %s", RolePlain),
		fmt.Sprintf("SELECT pg_create_physical_replication_slot('%s')", ReplicaName),
	}
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("pgcluster: bootstrap %q: %w", strings.SplitN(q, " PASSWORD", 2)[0], err)
		}
	}
	return nil
}

func (c *Cluster) initReplica(ctx context.Context) error {
	s := c.Replica
	if err := c.mkdirOwned(s.DataDir, 0o700); err != nil {
		return err
	}
	env := []string{"PGPASSWORD=" + c.passwords[RoleReplication]}
	if err := c.run(ctx, env, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(c.Primary.Port),
		"-U", RoleReplication, "-D", s.DataDir, "-X", "stream", "--no-sync", "-c", "fast"); err != nil {
		return err
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s application_name=%s",
		c.Primary.Port, RoleReplication, c.passwords[RoleReplication], ReplicaName)
	auto := fmt.Sprintf("primary_conninfo = '%s'\nprimary_slot_name = '%s'\n", conninfo, ReplicaName)
	if err := appendFile(filepath.Join(s.DataDir, "postgresql.auto.conf"), auto); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.DataDir, "standby.signal"), nil, 0o600); err != nil {
		return err
	}
	return c.chownTree(s.DataDir)
}

// WaitStreaming polls the primary until the replica streams from its slot
// and has reported a replay position.
func (c *Cluster) WaitStreaming(ctx context.Context) error {
	return c.pollPrimary(ctx, "replica streaming", func(conn *pgx.Conn) (bool, error) {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication r
			JOIN pg_replication_slots s ON s.active_pid = r.pid
			WHERE s.slot_name = $1 AND r.state = 'streaming' AND r.replay_lsn IS NOT NULL`, ReplicaName).Scan(&n)
		return n == 1, err
	})
}

// pollPrimary runs check on an admin connection every 50 ms until it
// reports done, ctx ends, or the start timeout passes.
func (c *Cluster) pollPrimary(ctx context.Context, what string, check func(*pgx.Conn) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	conn, err := c.Primary.Connect(ctx, RoleAdmin)
	if err != nil {
		return fmt.Errorf("pgcluster: wait for %s: %w", what, err)
	}
	defer conn.Close(context.Background())
	return Poll(ctx, 50*time.Millisecond, func() (bool, error) { return check(conn) })
}

// Poll calls check every interval until it returns true or an error, or
// ctx ends. It is the harness's only way to wait for the database.
func Poll(ctx context.Context, interval time.Duration, check func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last error
	for {
		ok, err := check()
		if err == nil && ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (s *Server) start(ctx context.Context) error {
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(s.c.opts.BinDir, "postgres"), "-D", s.DataDir, "-p", strconv.Itoa(s.Port))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig keeps a crashed test from leaking the server; its
	// backends exit when they notice the postmaster is gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.c.user.cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("pgcluster: start %s: %w", s.Name, err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(s.exited)
	}()
	ctx, cancel := context.WithTimeout(ctx, s.c.opts.StartTimeout)
	defer cancel()
	err = Poll(ctx, 50*time.Millisecond, func() (bool, error) {
		select {
		case <-s.exited:
			return false, errors.New("postmaster exited")
		default:
		}
		conn, err := s.Connect(ctx, RoleAdmin)
		if err != nil {
			return false, nil
		}
		conn.Close(context.Background())
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("pgcluster: %s did not accept connections: %w\n%s", s.Name, err, Tail(s.log, 20))
	}
	return nil
}

// stop asks for a fast shutdown and waits up to timeout, then kills.
func (s *Server) stop(timeout time.Duration) error {
	if s.cmd == nil {
		return nil
	}
	select {
	case <-s.exited:
		s.cmd = nil
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.exited:
	case <-t.C:
		s.signalGroup(syscall.SIGKILL)
		<-s.exited
	}
	s.cmd = nil
	return nil
}

// Running reports whether the postmaster is running.
func (s *Server) Running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// signalGroup sends sig to the postmaster and every process it forked.
// PostgreSQL's children call setsid(), so they are not in the
// postmaster's process group; they are found by parent pid in /proc. The
// postmaster goes first, so a stopped postmaster forks no new backend
// that would escape.
func (s *Server) signalGroup(sig syscall.Signal) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	pid := s.cmd.Process.Pid
	_ = syscall.Kill(pid, sig)
	for _, child := range children(pid) {
		_ = syscall.Kill(child, sig)
	}
}

// children lists the pids whose parent is pid.
func children(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state, ppid, ...
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

func (c *Cluster) run(ctx context.Context, env []string, bin string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.opts.BinDir, bin), args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.user.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: %s: %w\n%s", bin, err, out)
	}
	return nil
}

func (c *Cluster) mkdirOwned(dir string, mode os.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return err
	}
	return os.Chown(dir, int(c.user.uid), int(c.user.gid))
}

func (c *Cluster) chownTree(dir string) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(c.user.uid), int(c.user.gid))
	})
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// freePorts returns n distinct free loopback ports below the kernel's
// ephemeral range. A port from that range (what listening on port 0
// gives) is free when chosen but may be taken as the local port of any
// outgoing connection before the server binds it: a replica starts
// seconds after its port is chosen, while other test processes open
// hundreds of connections, and it failed with "Address already in use".
// The kernel never hands out a port below the range on its own, so only
// another process choosing the same way could take it, and each checks.
func freePorts(n int) ([]int, error) {
	low := ephemeralLow()
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var b [2]byte
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("pgcluster: no free port under %d after %d tries", low, tries)
		}
		_, _ = rand.Read(b[:])
		port := portFloor + int(uint16(b[0])<<8|uint16(b[1]))%(low-portFloor)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // in use
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	return ports, nil
}

// portFloor is the lowest port freePorts picks: above the well-known and
// most registered services' ports.
const portFloor = 15000

// ephemeralLow is the first port of the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), 32768 where it cannot be
// read or leaves no room under it.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low < portFloor+1000 {
		return 32768
	}
	return low
}

// RandomHex returns n random bytes in hex: a throwaway password.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Tail returns the last lines of the file at path ("" if unreadable):
// a server's log, in an error that says why it did not start.
func Tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1, for other
// harnesses that start servers beside the pair.
func FreePorts(n int) ([]int, error) { return freePorts(n) }
