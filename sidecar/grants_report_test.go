package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar/api"
)

// report sends a report of tok for job a, and returns its status, its
// Retry-After and its body.
func (s tokenSidecar) report(t *testing.T, tok string, rows int) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.url+"/v1/jobs/a/report", strings.NewReader(fmt.Sprintf(`{"token":%q,"rows":%d,"duration_ms":10}`, tok, rows)))
	req.Header.Set("Authorization", "Bearer "+grantsToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(bytes.TrimSpace(b))
}

// grantEnd is how throttled.grants says token id ended: "" while open,
// "gone" when no row is kept.
func grantEnd(t *testing.T, conn *pgx.Conn, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var ended *string
	err := conn.QueryRow(ctx, "SELECT ended FROM throttled.grants WHERE id = $1", id).Scan(&ended)
	switch {
	case err == pgx.ErrNoRows:
		return "gone"
	case err != nil:
		t.Fatal(err)
	case ended == nil:
		return ""
	}
	return *ended
}

// acquireServed polls acquire on s until it answers 200, and fails the
// test at once if it is refused for a token out: none should be.
func (s tokenSidecar) acquireServed(t *testing.T) string {
	t.Helper()
	var tok string
	pgtest.Eventually(t, 20*time.Second, func() error {
		code, body := s.post(t, "/v1/jobs/a/acquire", `{"n":1,"max_wait":"2s","worker":"w2"}`)
		var resp api.AcquireResponse
		if code == http.StatusOK && json.Unmarshal([]byte(body), &resp) == nil && len(resp.Tokens) == 1 {
			tok = resp.Tokens[0]
			return nil
		}
		if strings.Contains(body, "unreported grant") {
			t.Fatalf("acquire refused for a token out: %d %s; want none out", code, body)
		}
		return fmt.Errorf("acquire: %d %s", code, body)
	})
	return tok
}

// A report is answered 200 only once its end is stored in
// throttled.grants; while the row cannot be written it is 503 with
// Retry-After, the token stays out, and the retry stores it: the batch is
// counted exactly once, a further report is 409, and a restarted sidecar
// neither takes the token up as out nor accepts its report. Issue 51
// (10): with the row locked for 3 s, the report got 200 while its row
// stayed open (the failure only logged); after a restart the sidecar took
// the token up as out again, refused a new acquire for a batch that had
// finished, and accepted the same report a second time.
func TestReportIsAnsweredOnlyOnceItsEndIsStored(t *testing.T) {
	c := pgtest.Cluster(t)
	conn := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	locker := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	sc := startTokenSidecar(t, c, 0)
	tok := sc.acquire(t)

	ctx := context.Background()
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var id string
	if err := tx.QueryRow(ctx, "SELECT id FROM throttled.grants WHERE id = $1 FOR UPDATE", tok).Scan(&id); err != nil {
		t.Fatal(err)
	}
	code, retry, body := sc.report(t, tok, 7)
	if code != http.StatusServiceUnavailable || retry == "" {
		t.Fatalf("report while its row is locked: %d (Retry-After %q) %s; want 503 with Retry-After", code, retry, body)
	}
	t.Logf("while the row is locked: 503, Retry-After %s: %s", retry, body)
	if tot := sc.srv.reported("a"); tot.batches != 0 {
		t.Errorf("report totals %+v after a 503; want nothing counted", tot)
	}
	if !sc.srv.book.has(tok) {
		t.Errorf("the token is not out after its report's 503: the retry cannot find it")
	}
	if end := grantEnd(t, conn, tok); end != "" {
		t.Errorf("row ended %q after a 503; want it open", end)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	if code, _, body := sc.report(t, tok, 7); code != http.StatusOK {
		t.Fatalf("the retry once the row is free: %d %s; want 200", code, body)
	}
	if end := grantEnd(t, conn, tok); end != "reported" {
		t.Errorf("row ended %q after the 200; want reported", end)
	}
	if code, _, body := sc.report(t, tok, 7); code != http.StatusConflict {
		t.Errorf("a third report: %d %s; want 409", code, body)
	}
	if tot := sc.srv.reported("a"); tot.batches != 1 || tot.rows != 7 {
		t.Errorf("report totals %+v; want the batch counted once, 7 rows", tot)
	}
	sc.stop()

	// Restarted: the batch finished, so its token holds no slot (the cap
	// is 1) and its report is not taken again.
	second := startTokenSidecar(t, c, 0)
	tok2 := second.acquireServed(t)
	if code, _, body := second.report(t, tok, 7); code != http.StatusConflict {
		t.Errorf("the report again after a restart: %d %s; want 409", code, body)
	}
	if tot := second.srv.reported("a"); tot.batches != 0 {
		t.Errorf("report totals %+v after the restart; want the old report not counted again", tot)
	}
	if code, _, body := second.report(t, tok2, 1); code != http.StatusOK {
		t.Fatalf("report: %d %s", code, body)
	}
}

// A report of a token that expired is refused with 410 however late it
// comes, as long as throttled.grants keeps the token, also by a restarted
// sidecar; only a token never granted (or forgotten) is 404. Issue 51: a
// report more than twice the TTL after its grant was answered 404
// "unknown": the sidecar's memory and the table both forgot an ended
// token a TTL after its end.
func TestLateReportIsGoneHoweverLate(t *testing.T) {
	const ttl = time.Second
	c := pgtest.Cluster(t)
	conn := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	sc := startTokenSidecar(t, c, ttl)
	tok := sc.acquire(t)
	pgtest.Eventually(t, 10*time.Second, func() error {
		if n := sc.srv.book.out(); n != 0 {
			return fmt.Errorf("%d tokens out", n)
		}
		return nil
	})
	// Three TTLs past its expiry, by the database's clock.
	pgtest.Eventually(t, 20*time.Second, func() error {
		var late bool
		if err := conn.QueryRow(context.Background(), "SELECT now() > expires_at + make_interval(secs => $2) FROM throttled.grants WHERE id = $1", tok, 3*ttl.Seconds()).Scan(&late); err != nil {
			return err
		}
		if !late {
			return fmt.Errorf("token %s not three TTLs past its expiry yet", tok)
		}
		return nil
	})
	// Another token granted and reported: the sidecar prunes what it
	// remembers of ended tokens, and the table what it keeps, at each.
	tok2 := sc.acquire(t)
	if code, _, body := sc.report(t, tok2, 1); code != http.StatusOK {
		t.Fatalf("report: %d %s", code, body)
	}
	if code, _, body := sc.report(t, tok, 5); code != http.StatusGone {
		t.Errorf("a report four TTLs after its token's grant: %d %s; want 410", code, body)
	}
	sc.stop()

	second := startTokenSidecar(t, c, ttl)
	pgtest.Eventually(t, 20*time.Second, func() error {
		code, _, body := second.report(t, tok, 5)
		switch code {
		case http.StatusGone:
			return nil
		case http.StatusServiceUnavailable:
			return fmt.Errorf("report: %d %s", code, body)
		}
		t.Fatalf("the late report to a restarted sidecar: %d %s; want 410", code, body)
		return nil
	})
	if code, _, body := second.report(t, "0123456789abcdef01234567", 5); code != http.StatusNotFound {
		t.Errorf("a report of a token never granted: %d %s; want 404", code, body)
	}
	if end := grantEnd(t, conn, tok); end != "expired" {
		t.Errorf("row of the late token: %q; want expired, kept", end)
	}
}
