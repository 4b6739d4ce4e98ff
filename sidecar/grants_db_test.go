package sidecar

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/throttle"
)

const grantsToken = "grants-token-0123456789abcdef"

// tokenSidecar is one run of a sidecar on the package's pair, serving job
// a (10/s at most) to remote workers: its client, server and URL. stop
// ends the run as a crash or a deploy would, before the test's end.
type tokenSidecar struct {
	srv  *Server
	url  string
	stop func()
}

func startTokenSidecar(t *testing.T, c *pgcluster.Cluster, ttl time.Duration) tokenSidecar {
	t.Helper()
	return startTokenSidecarAt(t, c, ttl, "", "")
}

// startTokenSidecarAt is startTokenSidecar with listen { address = listen,
// id = id }, served on the socket that address binds, as `throttled run`
// serves it; listen "" keeps 127.0.0.1:18087 in the configuration and
// serves on a port of the test's own.
func startTokenSidecarAt(t *testing.T, c *pgcluster.Cluster, ttl time.Duration, listen, id string) tokenSidecar {
	t.Helper()
	client, err := throttled.Open(context.Background(), throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		CoordinationDSN: c.Primary.DSN(pgcluster.RoleAdmin), Coordinate: true, Controller: throttle.Config{MaxBudget: 20, InitialBudget: 20}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{Version: "v1", MaxConcurrent: 8, OpenReads: true, Listen: cmp.Or(listen, "127.0.0.1:18087"), SidecarID: id,
		Jobs:   []config.Job{{Name: "a", Weight: 1, MaxRate: 10}},
		Tokens: []config.Token{{Name: "worker", Secret: grantsToken, Scopes: []config.Scope{config.ScopeWork}}}}
	srv, err := New(client, cfg, nil, nil)
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	if ttl > 0 {
		srv.book.ttl = ttl
	}
	hs := httptest.NewUnstartedServer(srv.Handler())
	if listen != "" {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			client.Close()
			t.Fatal(err)
		}
		hs.Listener.Close()
		hs.Listener = ln
	}
	// Run keeps the claim on the sidecar's owner name, as `throttled run`
	// does, and gives it up when the run stops.
	claimCtx, stopClaim := context.WithCancel(context.Background())
	claimed := make(chan error, 1)
	go func() { claimed <- srv.Run(claimCtx) }()
	hs.Start()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			hs.Close()
			stopClaim()
			if err := <-claimed; err != nil {
				t.Errorf("Run: %v", err)
			}
			client.Close()
		}
	}
	t.Cleanup(stop)
	return tokenSidecar{srv: srv, url: hs.URL, stop: stop}
}

// post sends body to the sidecar at path with the work token.
func (s tokenSidecar) post(t *testing.T, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.url+path, bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+grantsToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// acquire takes one token for job a, polling until the sidecar leads and
// serves.
func (s tokenSidecar) acquire(t *testing.T) string {
	t.Helper()
	tok, _ := s.acquireSent(t)
	return tok
}

// acquireSent is acquire, with when the request that got the token was
// sent: the sidecar granted it after that, so its TTL runs from later.
// (Timing from the answer instead reads a TTL short by the answer's way
// back, 20 ms on a loaded machine.)
func (s tokenSidecar) acquireSent(t *testing.T) (string, time.Time) {
	t.Helper()
	var tok string
	var sent time.Time
	pgtest.Eventually(t, 20*time.Second, func() error {
		sent = time.Now()
		code, body := s.post(t, "/v1/jobs/a/acquire", `{"n":1,"max_wait":"2s","worker":"w1"}`)
		var resp api.AcquireResponse
		if code != http.StatusOK || json.Unmarshal([]byte(body), &resp) != nil || len(resp.Tokens) != 1 {
			return fmt.Errorf("acquire: %d %s", code, body)
		}
		tok = resp.Tokens[0]
		return nil
	})
	return tok, sent
}

// workerErrors is the failed batches job a's workers have reported to the
// leader, as their heartbeats wrote them.
func workerErrors(t *testing.T, conn *pgx.Conn) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var n int64
	if err := conn.QueryRow(ctx, "SELECT coalesce(sum(errors), 0)::bigint FROM throttled.workers WHERE job = 'a'").Scan(&n); err != nil && err != pgx.ErrNoRows {
		t.Fatal(err)
	}
	return n
}

// A token past its TTL expires when its time comes, with no acquire to
// notice it: its slot is freed, its batch counted as failed, and its late
// report refused with 410. Before, grants expired only when an acquire
// ran, and the late report was answered 200 {"reported":true}.
func TestLateReportIsRefusedAsExpired(t *testing.T) {
	const ttl = 2 * time.Second
	c := pgtest.Cluster(t)
	conn := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	sc := startTokenSidecar(t, c, ttl)
	tok, acquired := sc.acquireSent(t)
	before := workerErrors(t, conn)
	pgtest.Eventually(t, 10*time.Second, func() error {
		if n := sc.srv.book.out(); n != 0 {
			return fmt.Errorf("%d tokens out", n)
		}
		return nil
	})
	took := time.Since(acquired)
	t.Logf("token expired %.2f s after its acquire was sent (TTL %s), with no acquire between", took.Seconds(), ttl)
	if took < ttl {
		t.Errorf("token ended after %s, before its TTL %s", took, ttl)
	}
	code, body := sc.post(t, "/v1/jobs/a/report", `{"token":"`+tok+`","rows":5,"duration_ms":10}`)
	if code != http.StatusGone {
		t.Fatalf("late report: %d %s; want 410 Gone, the token expired", code, body)
	}
	// The expired token is a failed batch, as the leader hears it.
	pgtest.Eventually(t, 10*time.Second, func() error {
		if n := workerErrors(t, conn); n <= before {
			return fmt.Errorf("failed batches %d; want more than %d", n, before)
		}
		return nil
	})
	if tot := sc.srv.reported("a"); tot.rows != 0 || tot.batches != 0 {
		t.Errorf("report totals %+v after a refused report; want nothing counted", tot)
	}
}

// A sidecar restarted with a token out (cap 1: no batch has reported
// yet, so the job's in-flight cap is 1) serves no new token while the old
// one is out, accepts the old token's report and counts it, and then
// serves again. Before, grants lived only in the sidecar's memory: the
// restarted one served a token at once (two batches against a cap of 1)
// and refused the report with 404.
func TestRestartedSidecarKeepsItsTokens(t *testing.T) {
	// One Cluster call: each starts the test afresh, tokens out included.
	c := pgtest.Cluster(t)
	first := startTokenSidecar(t, c, 0)
	tok := first.acquire(t)
	if code, body := first.post(t, "/v1/jobs/a/acquire", `{"n":1,"max_wait":"1s","worker":"w2"}`); code != http.StatusTooManyRequests {
		t.Fatalf("second acquire before the restart: %d %s; want 429, the cap of 1 taken", code, body)
	}
	first.stop()

	second := startTokenSidecar(t, c, 0)
	// Poll until the new run serves acquires at all (it leads, its lease
	// is valid): each answer must be 429, naming the token out.
	pgtest.Eventually(t, 20*time.Second, func() error {
		code, body := second.post(t, "/v1/jobs/a/acquire", `{"n":1,"max_wait":"1s","worker":"w2"}`)
		switch {
		case code == http.StatusOK:
			t.Fatalf("restarted sidecar served a token while one was out against a cap of 1: %s", body)
		case code != http.StatusTooManyRequests:
			return fmt.Errorf("acquire: %d %s", code, body)
		}
		var th api.Throttled
		if json.Unmarshal([]byte(body), &th) != nil || !bytes.Contains([]byte(th.Reason), []byte("1 unreported grant from worker w1")) {
			return fmt.Errorf("429 reason %q; want the token out named", th.Reason)
		}
		return nil
	})
	code, body := second.post(t, "/v1/jobs/a/report", `{"token":"`+tok+`","rows":7,"duration_ms":10}`)
	if code != http.StatusOK {
		t.Fatalf("report after the restart: %d %s; want 200", code, body)
	}
	if tot := second.srv.reported("a"); tot.rows != 7 || tot.batches != 1 {
		t.Errorf("report totals %+v; want the batch's 7 rows counted", tot)
	}
	if code, body := second.post(t, "/v1/jobs/a/report", `{"token":"`+tok+`","rows":7,"duration_ms":10}`); code != http.StatusConflict {
		t.Errorf("second report: %d %s; want 409, reported already", code, body)
	}
	tok2 := second.acquire(t)
	if code, body := second.post(t, "/v1/jobs/a/report", `{"token":"`+tok2+`","rows":1,"duration_ms":10}`); code != http.StatusOK {
		t.Fatalf("report: %d %s", code, body)
	}
}

// A hold asked for while the primary restarts (a failover's window: no
// server takes writes) is never acknowledged and lost: each answer is 201
// (and the hold is there afterwards) or 503 with Retry-After and the
// database's error, so automation retries. Before, the window answered
// 500, which automation reads as a bug and does not retry.
func TestHoldInTheFailoverWindowIs503(t *testing.T) {
	c := pgtest.Cluster(t)
	sc := startTokenSidecar(t, c, 0)
	sc.srv.mu.Lock()
	sc.srv.cfg.Tokens = append(sc.srv.cfg.Tokens, config.Token{Name: "oncall", Secret: "pause-token-0123456789abcdef", Scopes: []config.Scope{config.ScopePause}})
	sc.srv.mu.Unlock()
	hold := func() (int, string, string) {
		req, _ := http.NewRequest("POST", sc.url+"/v1/holds", bytes.NewBufferString(`{"scope":"job:failover-window","ttl":"5m","reason":"failover window"}`))
		req.Header.Set("Authorization", "Bearer pause-token-0123456789abcdef")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
	}
	// The holds made here end with the test: the package's later tests
	// share the pair.
	t.Cleanup(func() {
		conn := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
		if _, err := conn.Exec(context.Background(), "UPDATE throttled.holds SET released_at = now(), released_by = 'test' WHERE scope_value = 'failover-window' AND released_at IS NULL"); err != nil {
			t.Errorf("remove the test's holds: %v", err)
		}
	})
	if code, _, body := hold(); code != http.StatusCreated {
		t.Fatalf("hold before the restart: %d %s", code, body)
	}
	restarted := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		restarted <- c.RestartPrimary(ctx)
	}()
	var placed, refused int
	for done := false; !done; {
		select {
		case err := <-restarted:
			if err != nil {
				t.Fatal(err)
			}
			done = true
		default:
		}
		code, retry, body := hold()
		switch code {
		case http.StatusCreated:
			placed++
		case http.StatusServiceUnavailable:
			refused++
			if retry == "" || !bytes.Contains([]byte(body), []byte("retry")) {
				t.Fatalf("503 without Retry-After or the word retry: %q %s", retry, body)
			}
			if refused == 1 {
				t.Logf("in the window: 503, Retry-After %s: %s", retry, body)
			}
		default:
			t.Fatalf("hold in the failover window: %d %s; want 201 or 503", code, body)
		}
	}
	t.Logf("during the restart: %d holds placed, %d refused with 503", placed, refused)
	if refused == 0 {
		t.Fatal("no hold was refused while the primary restarted: the window was not exercised")
	}
	conn := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM throttled.holds WHERE reason = 'failover window'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n < placed+1 {
		t.Errorf("%d holds in the database; want every acknowledged one, %d", n, placed+1)
	}
}
