package sidecar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar/api"
)

// freePort is a loopback port nothing listens on as the test starts.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// acquireHeld polls acquire on s until it serves at all, and fails the
// test if it ever grants a token: a token is out against a cap of 1, and
// every answer must be 429 naming it.
func (s tokenSidecar) acquireHeld(t *testing.T, names string) {
	t.Helper()
	pgtest.Eventually(t, 20*time.Second, func() error {
		code, body := s.post(t, "/v1/jobs/a/acquire", `{"n":1,"max_wait":"1s","worker":"w2"}`)
		switch {
		case code == http.StatusOK:
			t.Fatalf("a token was granted while one was out against a cap of 1: %s", body)
		case code != http.StatusTooManyRequests:
			return fmt.Errorf("acquire: %d %s", code, body)
		}
		var th api.Throttled
		if json.Unmarshal([]byte(body), &th) != nil || !bytes.Contains([]byte(th.Reason), []byte(names)) {
			return fmt.Errorf("429 reason %q; want the token out named (%q)", th.Reason, names)
		}
		return nil
	})
}

// A sidecar restarted on the same socket with its listen address written
// differently (localhost:P where it ran as 127.0.0.1:P) is the same
// sidecar: it takes its tokens up again. Issue 51 (9): tokens were kept
// under the host name and listen.address as written, so the restarted
// sidecar granted a new token with one out against a cap of 1, and
// refused the old token's report with 409 "granted by another sidecar".
func TestRestartOnTheSameSocketWrittenDifferentlyKeepsItsTokens(t *testing.T) {
	c := pgtest.Cluster(t)
	port := freePort(t)
	first := startTokenSidecarAt(t, c, 0, "127.0.0.1:"+port, "")
	tok := first.acquire(t)
	first.stop()

	second := startTokenSidecarAt(t, c, 0, "localhost:"+port, "")
	second.acquireHeld(t, "1 unreported grant from worker w1")
	if code, body := second.post(t, "/v1/jobs/a/report", `{"token":"`+tok+`","rows":7,"duration_ms":10}`); code != http.StatusOK {
		t.Fatalf("the first run's token reported to the second: %d %s; want 200", code, body)
	}
	if tot := second.srv.reported("a"); tot.rows != 7 || tot.batches != 1 {
		t.Errorf("report totals %+v; want the batch's 7 rows counted once", tot)
	}
	if code, body := second.post(t, "/v1/jobs/a/report", `{"token":"`+tok+`","rows":7,"duration_ms":10}`); code != http.StatusConflict {
		t.Errorf("the same report again: %d %s; want 409", code, body)
	}
	// Reported, the slot is free again.
	tok2 := second.acquire(t)
	if code, body := second.post(t, "/v1/jobs/a/report", `{"token":"`+tok2+`","rows":1,"duration_ms":10}`); code != http.StatusOK {
		t.Fatalf("report: %d %s", code, body)
	}
}

// A sidecar with a configured id (listen { id }) is known by it: started
// again on another socket (a pod rescheduled under a new name), it takes
// its tokens up. But a second live sidecar under the same id never takes
// up the first one's tokens: while the first holds the id, the second
// serves no token (503) and refuses their reports (503, nothing
// counted); once the first stops, the second takes the id and the tokens,
// and the cap holds across the two.
func TestSidecarIDIsNeverTakenFromALiveSidecar(t *testing.T) {
	c := pgtest.Cluster(t)
	first := startTokenSidecarAt(t, c, 0, "127.0.0.1:"+freePort(t), "throttled-0")
	tok := first.acquire(t)

	second := startTokenSidecarAt(t, c, 0, "127.0.0.1:"+freePort(t), "throttled-0")
	const says = `another live sidecar holds the owner name \"throttled-0\"`
	pgtest.Eventually(t, 20*time.Second, func() error {
		code, body := second.post(t, "/v1/jobs/a/acquire", `{"n":1,"max_wait":"1s","worker":"w2"}`)
		if code == http.StatusOK {
			t.Fatalf("a second live sidecar under the same id granted a token: %s", body)
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(body, says) {
			return fmt.Errorf("acquire: %d %s; want 503 saying %s", code, body, says)
		}
		return nil
	})
	if code, _, body := second.report(t, tok, 7); code != http.StatusServiceUnavailable {
		t.Fatalf("the first sidecar's token reported to the second while the first lives: %d %s; want 503", code, body)
	}
	if n := second.srv.book.out(); n != 0 {
		t.Fatalf("the second sidecar holds %d tokens while the first lives; want none taken up", n)
	}
	first.stop()

	second.acquireHeld(t, "1 unreported grant from worker w1")
	if code, _, body := second.report(t, tok, 7); code != http.StatusOK {
		t.Fatalf("the first sidecar's token reported to the second once the first stopped: %d %s; want 200", code, body)
	}
	if tot := second.srv.reported("a"); tot.rows != 7 || tot.batches != 1 {
		t.Errorf("report totals %+v; want the batch's 7 rows counted once", tot)
	}
}
