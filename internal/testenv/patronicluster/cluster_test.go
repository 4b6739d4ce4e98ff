package patronicluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// The topology comes up with node1 leading and every other node streaming
// from its slot, and the roles exist on every node.
func TestStart(t *testing.T) {
	c := start(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if leader.Name != "node1" {
		t.Errorf("leader %s, want node1 (it bootstraps alone)", leader.Name)
	}
	for _, n := range c.Nodes {
		conn, err := n.Connect(ctx, RoleMonitor)
		if err != nil {
			t.Fatalf("%s as %s: %v", n.Name, RoleMonitor, err)
		}
		var inRecovery bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
		if inRecovery != (n != leader) {
			t.Errorf("%s in recovery %v", n.Name, inRecovery)
		}
	}
}

// MultiHostDSN lists every node in order, with the attribute asked for.
func TestMultiHostDSN(t *testing.T) {
	c := &Cluster{passwords: map[string]string{RoleMonitor: "pw"}}
	c.Nodes = []*Node{{Name: "node1", Port: 5001, c: c}, {Name: "node2", Port: 5002, c: c}}
	u, err := url.Parse(c.MultiHostDSN(RoleMonitor, "read-write", c.Nodes[1], c.Nodes[0]))
	if err != nil {
		t.Fatal(err)
	}
	if u.Host != "127.0.0.1:5002,127.0.0.1:5001" || u.Query().Get("target_session_attrs") != "read-write" || u.User.Username() != RoleMonitor {
		t.Errorf("got %s", u)
	}
	if got := c.MultiHostDSN(RoleMonitor, ""); strings.Contains(got, "target_session_attrs") || !strings.Contains(got, "127.0.0.1:5001,127.0.0.1:5002") {
		t.Errorf("no attribute, all nodes: got %s", got)
	}
}

// start starts a cluster of n nodes, removed when the test ends. It skips
// only when Patroni or etcd is not installed.
func start(t *testing.T, n int) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Nodes: n, Log: func(f string, a ...any) { t.Logf(f, a...) }})
	if errors.Is(err, ErrNoPatroni) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(fmt.Errorf("start patroni cluster: %w", err))
	}
	t.Cleanup(c.Stop)
	return c
}
