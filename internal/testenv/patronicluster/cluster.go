package patronicluster

import (
	"context"
	"encoding/json"
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
	"github.com/throttled/throttled/internal/testenv/pgcluster"
)

// Role names the cluster is bootstrapped with.
const (
	// RoleAdmin is Patroni's superuser. Tests use it to set up and to
	// look, never to sample or to run jobs.
	RoleAdmin = "postgres"
	// RoleReplication is Patroni's replication user.
	RoleReplication = "throttled_replicator"
	// RoleMonitor is the sampler's role: a login role in pg_monitor.
	RoleMonitor = "throttled_monitor"
	// RoleOwner owns throttled's schema (it may create schemas in the
	// database): the coordination DSN's role.
	RoleOwner = "throttled_owner"
	// RoleJob runs the jobs' batches. It owns the tests' tables and is a
	// member of RoleOwner, for the jobs' checkpoints in throttled's schema.
	RoleJob = "throttled_job"
)

// MaxConnections is every node's max_connections.
const MaxConnections = 50

// ErrNoPatroni reports that the patroni or etcd binary is missing.
// `make deps` installs them (scripts/ensure-patroni).
var ErrNoPatroni = errors.New("patronicluster: patroni or etcd not found; run `make deps` or scripts/ensure-patroni (apt-get install patroni etcd-server)")

// Options tune a cluster. The zero value is ready to use.
type Options struct {
	// Nodes is how many Patroni nodes to start: 2 or 3. Defaults to 3.
	Nodes int
	// BinDir holds the PostgreSQL server binaries. Defaults to
	// pgcluster.FindBinDir().
	BinDir string
	// StartTimeout bounds bringing the cluster up. Defaults to 120s.
	StartTimeout time.Duration
	// Log, when set, receives one line per harness step.
	Log func(format string, args ...any)
}

// Patroni's timing. loop_wait 1 s makes Patroni notice a crash within a
// second; ttl 10 s is how long a leader that stops renewing its key
// (partitioned, or its Patroni dead) keeps it.
const (
	ttl          = 10
	loopWait     = 1
	retryTimeout = 4
)

// Cluster is a running etcd and its Patroni nodes. Its methods are safe for
// concurrent use, except Stop.
type Cluster struct {
	// Nodes are the Patroni nodes, node1 first.
	Nodes []*Node
	// Scope is the Patroni cluster's name (its scope in etcd).
	Scope string

	opts      Options
	dir       string
	acct      pgcluster.Account
	etcd      *process
	passwords map[string]string
}

// Node is one Patroni node and the PostgreSQL it manages.
type Node struct {
	// Name is the Patroni member name ("node1", ...): also its replication
	// slot's name on the leader.
	Name string
	// Port is PostgreSQL's loopback TCP port.
	Port int
	// APIPort is Patroni's REST API port.
	APIPort int
	// DataDir is PostgreSQL's data directory.
	DataDir string

	c       *Cluster
	dir     string
	patroni *process
}

// Addr is the node's PostgreSQL address, host:port.
func (n *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port)) }

// APIURL is the base URL of the node's Patroni REST API.
func (n *Node) APIURL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(n.APIPort))
}

// Start starts etcd and the Patroni nodes, waits until one leads and every
// other streams from it, and creates the roles throttled needs.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Nodes < 2 || opts.Nodes > 3 {
		return nil, fmt.Errorf("patronicluster: Nodes must be 2 or 3, got %d", opts.Nodes)
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 120 * time.Second
	}
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	for _, bin := range []string{patroniBin, etcdBin} {
		if _, err := os.Stat(bin); err != nil {
			return nil, ErrNoPatroni
		}
	}
	if opts.BinDir == "" {
		if opts.BinDir, err = pgcluster.FindBinDir(); err != nil {
			return nil, err
		}
	}
	acct, err := pgcluster.ServerAccount()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "throttled-patroni-")
	if err != nil {
		return nil, fmt.Errorf("patronicluster: temp dir: %w", err)
	}
	c := &Cluster{opts: opts, dir: dir, acct: acct, passwords: map[string]string{}, Scope: "throttled-" + pgcluster.RandomHex(4)}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	for _, r := range []string{RoleAdmin, RoleReplication, RoleMonitor, RoleOwner, RoleJob} {
		c.passwords[r] = pgcluster.RandomHex(16)
	}
	ports, err := pgcluster.FreePorts(2 + 2*opts.Nodes)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	started := time.Now()
	if err := c.startEtcd(ctx, ports[0], ports[1]); err != nil {
		return nil, err
	}
	for i := range opts.Nodes {
		n := &Node{Name: fmt.Sprintf("node%d", i+1), Port: ports[2+2*i], APIPort: ports[3+2*i], c: c}
		n.dir = filepath.Join(dir, n.Name)
		n.DataDir = filepath.Join(n.dir, "data")
		c.Nodes = append(c.Nodes, n)
	}
	// node1 bootstraps alone, so it leads; the others then clone it.
	if err := c.Nodes[0].start(ports[0]); err != nil {
		return nil, err
	}
	if _, err := c.WaitLeader(ctx, nil); err != nil {
		return nil, err
	}
	if err := c.bootstrapRoles(ctx); err != nil {
		return nil, err
	}
	for _, n := range c.Nodes[1:] {
		if err := n.start(ports[0]); err != nil {
			return nil, err
		}
	}
	if err := c.WaitStreaming(ctx, opts.Nodes-1); err != nil {
		return nil, err
	}
	opts.Log("patronicluster: %d nodes streaming after %s", opts.Nodes, time.Since(started).Round(time.Millisecond))
	return c, nil
}

// Dir is the cluster's temporary directory (logs live under it).
func (c *Cluster) Dir() string { return c.dir }

// Password returns role's password, so tests can check it reaches no log.
func (c *Cluster) Password(role string) string { return c.passwords[role] }

// Node returns the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// DSN is a single-host connection URL for role on n.
func (n *Node) DSN(role string) string {
	return n.c.dsn(role, []*Node{n}, "")
}

// Connect opens a connection to n as role, bounded by ctx and 5 s.
func (n *Node) Connect(ctx context.Context, role string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return pgx.Connect(ctx, n.DSN(role))
}

// MultiHostDSN is one libpq multi-host URL for role listing the nodes (all
// of them, node1 first, when none is given) with target_session_attrs tsa
// ("" for none), as a user writes it for a Patroni cluster:
//
//	postgres://role:pw@127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3/postgres?target_session_attrs=read-write
func (c *Cluster) MultiHostDSN(role, tsa string, nodes ...*Node) string {
	if len(nodes) == 0 {
		nodes = c.Nodes
	}
	return c.dsn(role, nodes, tsa)
}

func (c *Cluster) dsn(role string, nodes []*Node, tsa string) string {
	hosts := make([]string, len(nodes))
	for i, n := range nodes {
		hosts[i] = n.Addr()
	}
	q := url.Values{"sslmode": {"disable"}, "connect_timeout": {"3"}}
	if tsa != "" {
		q.Set("target_session_attrs", tsa)
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(role, c.passwords[role]),
		Host: strings.Join(hosts, ","), Path: "/postgres", RawQuery: q.Encode()}
	return u.String()
}

// bootstrapRoles creates throttled's roles on the leader (node1); the
// replicas clone them.
func (c *Cluster) bootstrapRoles(ctx context.Context) error {
	conn, err := c.Nodes[0].Connect(ctx, RoleAdmin)
	if err != nil {
		return fmt.Errorf("patronicluster: connect to the leader: %w", err)
	}
	defer conn.Close(context.Background())
	stmts := []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s' IN ROLE pg_monitor", RoleMonitor, c.passwords[RoleMonitor]),
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", RoleOwner, c.passwords[RoleOwner]),
		fmt.Sprintf("GRANT CREATE ON DATABASE postgres TO %s", RoleOwner),
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s' IN ROLE %s", RoleJob, c.passwords[RoleJob], RoleOwner),
		fmt.Sprintf("GRANT CREATE ON SCHEMA public TO %s", RoleJob),
	}
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("patronicluster: bootstrap %q: %w", strings.SplitN(q, " PASSWORD", 2)[0], err)
		}
	}
	return nil
}

const (
	patroniBin = "/usr/bin/patroni"
	etcdBin    = "/usr/bin/etcd"
)

func (c *Cluster) startEtcd(ctx context.Context, clientPort, peerPort int) error {
	data := filepath.Join(c.dir, "etcd")
	if err := c.mkdirOwned(data, 0o700); err != nil {
		return err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	p, err := c.spawn(filepath.Join(c.dir, "etcd.log"), data, etcdBin,
		"--name", "etcd0", "--data-dir", data,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "etcd0="+peer, "--initial-cluster-state", "new",
		"--initial-cluster-token", c.Scope, "--logger", "zap", "--log-level", "warn")
	if err != nil {
		return fmt.Errorf("patronicluster: start etcd: %w", err)
	}
	c.etcd = p
	err = pgcluster.Poll(ctx, 50*time.Millisecond, func() (bool, error) {
		if p.done() {
			return false, errors.New("etcd exited")
		}
		var h struct {
			Health string `json:"health"`
		}
		if err := getJSON(ctx, client+"/health", &h); err != nil {
			return false, nil
		}
		return h.Health == "true", nil
	})
	if err != nil {
		return fmt.Errorf("patronicluster: etcd not healthy: %w\n%s", err, pgcluster.Tail(p.log, 20))
	}
	return nil
}

// config is the node's Patroni configuration, as JSON (a subset of YAML,
// which Patroni reads).
func (n *Node) config(etcdPort int) map[string]any {
	c := n.c
	return map[string]any{
		"scope":     c.Scope,
		"namespace": "/throttled/",
		"name":      n.Name,
		"log":       map[string]any{"level": "INFO"},
		"restapi": map[string]any{
			"listen":          net.JoinHostPort("127.0.0.1", strconv.Itoa(n.APIPort)),
			"connect_address": net.JoinHostPort("127.0.0.1", strconv.Itoa(n.APIPort)),
		},
		"etcd3": map[string]any{"hosts": []string{fmt.Sprintf("127.0.0.1:%d", etcdPort)}},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl": ttl, "loop_wait": loopWait, "retry_timeout": retryTimeout,
				"maximum_lag_on_failover": 16 << 20,
				// Fail over at once when the primary crashes, rather
				// than restarting it in place for up to 300 s.
				"primary_start_timeout": 0,
				"postgresql": map[string]any{
					"use_pg_rewind": true,
					"use_slots":     true,
					"parameters": map[string]any{
						"max_connections":                MaxConnections,
						"superuser_reserved_connections": 3,
						"wal_level":                      "replica",
						"hot_standby":                    "on",
						"wal_log_hints":                  "on", // pg_rewind
						"max_wal_senders":                10,
						"max_replication_slots":          10,
						"wal_keep_size":                  "128MB",
						"wal_receiver_status_interval":   "1s",
						"wal_sender_timeout":             "10s",
						"wal_receiver_timeout":           "10s",
						"hot_standby_feedback":           "on",
					},
				},
			},
			"initdb": []any{map[string]string{"encoding": "UTF8"}, map[string]string{"locale": "C"}},
		},
		"postgresql": map[string]any{
			"listen":          n.Addr(),
			"connect_address": n.Addr(),
			"data_dir":        n.DataDir,
			"bin_dir":         c.opts.BinDir,
			"pgpass":          filepath.Join(n.dir, "pgpass"),
			"authentication": map[string]any{
				"superuser":   map[string]string{"username": RoleAdmin, "password": c.passwords[RoleAdmin]},
				"replication": map[string]string{"username": RoleReplication, "password": c.passwords[RoleReplication]},
			},
			"parameters": map[string]any{
				"unix_socket_directories": filepath.Join(n.dir, "sock"),
				"shared_buffers":          "32MB",
				"fsync":                   "off",
				"synchronous_commit":      "off",
				"logging_collector":       "off",
				"log_min_messages":        "warning",
				"log_line_prefix":         "%m [%p] %q%u@%d ",
			},
			"pg_hba": []string{
				"host all all 127.0.0.1/32 scram-sha-256",
				"host replication all 127.0.0.1/32 scram-sha-256",
			},
		},
	}
}

func (n *Node) start(etcdPort int) error {
	c := n.c
	for _, d := range []string{n.dir, filepath.Join(n.dir, "sock"), filepath.Join(n.dir, "tmp")} {
		if err := c.mkdirOwned(d, 0o700); err != nil {
			return err
		}
	}
	cfg, err := json.MarshalIndent(n.config(etcdPort), "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(n.dir, "patroni.yml")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return err
	}
	if err := os.Chown(path, int(c.acct.UID), int(c.acct.GID)); err != nil {
		return err
	}
	p, err := c.spawn(filepath.Join(n.dir, "patroni.log"), filepath.Join(n.dir, "tmp"), patroniBin, path)
	if err != nil {
		return fmt.Errorf("patronicluster: start patroni %s: %w", n.Name, err)
	}
	n.patroni = p
	c.opts.Log("patronicluster: %s started (postgres :%d, api :%d)", n.Name, n.Port, n.APIPort)
	return nil
}

// Stop stops every Patroni node (which stops its postgres), then etcd, and
// removes the directory. A node whose Patroni does not stop within 30 s is
// killed, with its postmaster. It is safe to call more than once.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		if n.patroni != nil {
			n.patroni.stop(syscall.SIGTERM, 30*time.Second)
		}
	}
	for _, n := range c.Nodes {
		// A postmaster left behind (Patroni killed) goes too.
		if pid, err := postmasterPID(n.DataDir); err == nil && syscall.Kill(pid, 0) == nil {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = pgcluster.Poll(ctx, 100*time.Millisecond, func() (bool, error) { return syscall.Kill(pid, 0) != nil, nil })
			cancel()
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if c.etcd != nil {
		c.etcd.stop(syscall.SIGTERM, 10*time.Second)
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
		c.dir = ""
	}
}

// postmasterPID reads the postmaster's pid from the first line of
// dataDir/postmaster.pid.
func postmasterPID(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("patronicluster: bad postmaster.pid in %s: %q", dataDir, line)
	}
	return pid, nil
}

// process is a child process of the harness.
type process struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

// spawn starts bin as the servers' account, its output appended to log,
// with HOME and TMPDIR at home (a directory the account may write).
func (c *Cluster) spawn(log, home, bin string, args ...string) (*process, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = f, f
	// Debian's python, not whatever python3 is first on the caller's
	// PATH; HOME and TMPDIR where the account may write.
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "TMPDIR=" + home}
	// Pdeathsig keeps a crashed test from leaking the process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.acct.Credential, Pdeathsig: syscall.SIGKILL}
	p := &process{cmd: cmd, log: log, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *process) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

func (p *process) stop(sig syscall.Signal, timeout time.Duration) {
	if p.done() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func (c *Cluster) mkdirOwned(dir string, mode os.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return err
	}
	if err := os.Chmod(dir, mode); err != nil {
		return err
	}
	return os.Chown(dir, int(c.acct.UID), int(c.acct.GID))
}
