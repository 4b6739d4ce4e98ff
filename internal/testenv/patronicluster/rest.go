package patronicluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
)

// Member is one node as Patroni's GET /cluster reports it.
type Member struct {
	Name string `json:"name"`
	// Role is "leader", "replica" or "sync_standby".
	Role string `json:"role"`
	// State is "running", "streaming", "starting", "stopped", ...
	State    string `json:"state"`
	Port     int    `json:"port"`
	Timeline int    `json:"timeline"`
}

// httpTimeout bounds every REST call.
const httpTimeout = 3 * time.Second

var httpClient = &http.Client{Timeout: httpTimeout}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	return json.Unmarshal(body, v)
}

// Members reads GET /cluster from the first node whose REST API answers.
func (c *Cluster) Members(ctx context.Context) ([]Member, error) {
	var errs []error
	for _, n := range c.Nodes {
		if n.patroni == nil || n.patroni.done() {
			continue
		}
		var out struct {
			Members []Member `json:"members"`
		}
		if err := getJSON(ctx, n.APIURL()+"/cluster", &out); err != nil {
			errs = append(errs, err)
			continue
		}
		return out.Members, nil
	}
	return nil, fmt.Errorf("patronicluster: no REST API answered: %w", errors.Join(errs...))
}

// Leader returns the node Patroni's /cluster names leader, with its
// postgres running; an error when there is none (an election under way).
func (c *Cluster) Leader(ctx context.Context) (*Node, error) {
	ms, err := c.Members(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m.Role == "leader" && m.State == "running" {
			if n := c.Node(m.Name); n != nil {
				return n, nil
			}
		}
	}
	return nil, fmt.Errorf("patronicluster: no running leader in %+v", ms)
}

// WaitLeader polls until Patroni names a running leader that accept
// reports true for (nil accepts any) and its postgres takes writes: a
// connection finds it out of recovery.
func (c *Cluster) WaitLeader(ctx context.Context, accept func(*Node) bool) (*Node, error) {
	var leader *Node
	err := pgcluster.Poll(ctx, 100*time.Millisecond, func() (bool, error) {
		n, err := c.Leader(ctx)
		if err != nil {
			return false, err
		}
		if accept != nil && !accept(n) {
			return false, fmt.Errorf("leader is %s", n.Name)
		}
		conn, err := n.Connect(ctx, RoleAdmin)
		if err != nil {
			return false, err
		}
		defer conn.Close(context.Background())
		var inRecovery bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
			return false, err
		}
		if inRecovery {
			return false, fmt.Errorf("leader %s still in recovery", n.Name)
		}
		leader = n
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("patronicluster: wait for a leader: %w%s", err, c.logs())
	}
	return leader, nil
}

// WaitStreaming polls until the leader has replicas walsenders streaming
// (each with a replay position) from its members' slots.
func (c *Cluster) WaitStreaming(ctx context.Context, replicas int) error {
	err := pgcluster.Poll(ctx, 100*time.Millisecond, func() (bool, error) {
		n, err := c.Leader(ctx)
		if err != nil {
			return false, err
		}
		conn, err := n.Connect(ctx, RoleAdmin)
		if err != nil {
			return false, err
		}
		defer conn.Close(context.Background())
		got, err := streaming(ctx, conn)
		if err != nil {
			return false, err
		}
		if got != replicas {
			return false, fmt.Errorf("%d of %d replicas streaming from %s", got, replicas, n.Name)
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("patronicluster: wait for %d replicas streaming: %w%s", replicas, err, c.logs())
	}
	return nil
}

// streaming counts the walsenders streaming from a physical slot with a
// replay position.
func streaming(ctx context.Context, conn *pgx.Conn) (int, error) {
	var n int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication r
		JOIN pg_replication_slots s ON s.active_pid = r.pid
		WHERE r.state = 'streaming' AND r.replay_lsn IS NOT NULL`).Scan(&n)
	return n, err
}

// Switchover asks Patroni (POST /switchover on the leader's REST API) to
// hand the leadership from the current leader to candidate, and returns
// the leader it asked to step down. Patroni answers once the switchover is
// done or has failed; the caller then waits with WaitLeader.
func (c *Cluster) Switchover(ctx context.Context, candidate *Node) (*Node, error) {
	leader, err := c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	if leader == candidate {
		return nil, fmt.Errorf("patronicluster: %s leads already", candidate.Name)
	}
	body, _ := json.Marshal(map[string]string{"leader": leader.Name, "candidate": candidate.Name})
	// Patroni waits for the switchover before it answers: longer than a
	// read.
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, leader.APIURL()+"/switchover", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("patronicluster: switchover: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("patronicluster: switchover %s -> %s: %s: %s", leader.Name, candidate.Name, resp.Status, bytes.TrimSpace(msg))
	}
	c.opts.Log("patronicluster: switchover %s -> %s: %s", leader.Name, candidate.Name, bytes.TrimSpace(msg))
	return leader, nil
}

// KillLeaderPostmaster sends SIGKILL to the leader's postmaster (its pid
// from postmaster.pid) and returns the leader it killed. Patroni, with
// primary_start_timeout 0, then fails over to a replica.
func (c *Cluster) KillLeaderPostmaster(ctx context.Context) (*Node, error) {
	leader, err := c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	pid, err := postmasterPID(leader.DataDir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return nil, fmt.Errorf("patronicluster: kill -9 %d (%s's postmaster): %w", pid, leader.Name, err)
	}
	c.opts.Log("patronicluster: killed %s's postmaster (pid %d)", leader.Name, pid)
	return leader, nil
}

// logs is the tail of every node's log, for a failed wait's error.
func (c *Cluster) logs() string {
	var b bytes.Buffer
	for _, n := range c.Nodes {
		if n.patroni != nil {
			fmt.Fprintf(&b, "\n--- %s (patroni.log) ---\n%s", n.Name, pgcluster.Tail(n.patroni.log, 15))
		}
	}
	return b.String()
}
