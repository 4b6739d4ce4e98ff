package sidecar_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/throttle/hold"
)

const userHeader = "X-Webauth-User"

// actionToken is the pause token a Grafana action carries.
const actionToken = "action-token-0123456789abcdef"

// confirmPage runs a sidecar whose confirm page trusts userHeader and may
// return to a stand-in Grafana, whose dashboard URL it returns.
func confirmPage(t *testing.T) (base, dashboard string, db *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	client, admin := coordinatedClient(t)
	grafana := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, `<!doctype html><title>Grafana</title><h1 id="grafana">throttled jobs</h1>`)
	}))
	t.Cleanup(grafana.Close)
	dashboard = grafana.URL + "/d/throttled-jobs/jobs?orgId=1"
	cfg := configWith("v1", config.Job{Name: "ui-job", Weight: 1})
	cfg.OpenReads = false
	cfg.HoldTTL = hold.TTLPolicy{Default: 30 * time.Minute, Max: 24 * time.Hour}
	cfg.Grafana = config.Grafana{UserHeader: userHeader, ReturnURLs: []string{grafana.URL + "/d/"}}
	cfg.Tokens = []config.Token{{Name: "grafana-actions", Secret: actionToken, Scopes: []config.Scope{config.ScopePause}}}
	srv, err := sidecar.New(client, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	db, err = pgxpool.New(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if _, err := db.Exec(ctx, "UPDATE throttled.holds SET released_at = now(), released_by = 'test' WHERE released_at IS NULL"); err != nil {
		t.Fatal(err)
	}
	return hs.URL, dashboard, db
}

func activeHolds(t *testing.T, db *pgxpool.Pool, job string) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT actor || ': ' || reason FROM throttled.holds
		WHERE scope_kind = 'job' AND scope_value = $1 AND released_at IS NULL AND expires_at > now() ORDER BY id`, job)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func uiDo(t *testing.T, method, u, user string, form url.Values) (int, string, http.Header) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, u, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if user != "" {
		req.Header.Set(userHeader, user)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// The confirm page, without a browser: who may see it, that GET changes
// nothing, and that every POST needs its user's fresh CSRF token and an
// allow-listed return URL.
func TestConfirmPageRulesWithoutABrowser(t *testing.T) {
	base, dashboard, db := confirmPage(t)
	page := base + "/ui/pause?job=ui-job&return=" + url.QueryEscape(dashboard)

	if code, _, _ := uiDo(t, "GET", page, "", nil); code != http.StatusUnauthorized {
		t.Fatalf("the page for nobody: %d; want 401", code)
	}
	code, html, hdr := uiDo(t, "GET", page, "alice", nil)
	if code != 200 || !strings.Contains(html, `id="confirm"`) || !strings.Contains(html, "as alice") {
		t.Fatalf("the page for alice: %d\n%s", code, html)
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("the page can be framed: CSP %q", csp)
	}
	if got := activeHolds(t, db, "ui-job"); len(got) != 0 {
		t.Fatalf("GET added holds: %v", got)
	}
	m := csrfField.FindStringSubmatch(html)
	if m == nil {
		t.Fatal("no CSRF token in the form")
	}
	csrf := m[1]
	form := func(csrf, ret string) url.Values {
		return url.Values{"csrf": {csrf}, "job": {"ui-job"}, "return": {ret}, "reason": {"replica rebuild"}, "ttl": {"20m"}}
	}
	for _, tc := range []struct {
		name, user string
		form       url.Values
		want       int
	}{
		{"no CSRF token", "alice", form("", dashboard), http.StatusForbidden},
		{"a forged token", "alice", form("1700000000.00ff", dashboard), http.StatusForbidden},
		{"alice's token sent as bob", "bob", form(csrf, dashboard), http.StatusForbidden},
		{"a return URL off the allow-list", "alice", form(csrf, "https://evil.example/d/"), http.StatusBadRequest},
		{"nobody", "", form(csrf, dashboard), http.StatusUnauthorized},
	} {
		if code, body, _ := uiDo(t, "POST", base+"/ui/pause", tc.user, tc.form); code != tc.want {
			t.Errorf("%s: %d; want %d\n%s", tc.name, code, tc.want, body)
		}
	}
	if code, _, _ := uiDo(t, "GET", base+"/ui/pause?job=ui-job&return="+url.QueryEscape("https://evil.example/"), "alice", nil); code != http.StatusBadRequest {
		t.Errorf("GET with a return URL off the allow-list: %d; want 400", code)
	}
	if got := activeHolds(t, db, "ui-job"); len(got) != 0 {
		t.Fatalf("refused posts added holds: %v", got)
	}
	code, _, hdr = uiDo(t, "POST", base+"/ui/pause", "alice", form(csrf, dashboard))
	if code != http.StatusSeeOther || hdr.Get("Location") != dashboard {
		t.Fatalf("the confirmed pause: %d to %q; want 303 to %s", code, hdr.Get("Location"), dashboard)
	}
	if got := activeHolds(t, db, "ui-job"); len(got) != 1 || got[0] != "alice: replica rebuild" {
		t.Fatalf("holds after the pause: %v", got)
	}
	// The page now lists the hold with a resume button; releasing it is a
	// CSRF-guarded POST too. The page renders the holds from the watcher's
	// memory, which may still list a hold an earlier test left (released
	// by confirmPage's UPDATE) until its notification arrives: wait for
	// the new one, and for the released one to go.
	var n int64
	if err := db.QueryRow(context.Background(), `SELECT id FROM throttled.holds
		WHERE scope_kind = 'job' AND scope_value = 'ui-job' AND released_at IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("h%d", n)
	pgtest.Eventually(t, 10*time.Second, func() error {
		_, html, _ = uiDo(t, "GET", base+"/ui/resume?job=ui-job", "alice", nil)
		listed := regexp.MustCompile(`name="id" value="(h\d+)"`).FindAllStringSubmatch(html, -1)
		if len(listed) != 1 || listed[0][1] != id {
			return fmt.Errorf("the page lists holds %v; want only %s", listed, id)
		}
		return nil
	})
	if code, _, _ := uiDo(t, "POST", base+"/ui/release", "alice", url.Values{"id": {id}, "job": {"ui-job"}}); code != http.StatusForbidden {
		t.Errorf("release without CSRF: %d; want 403", code)
	}
	if code, body, _ := uiDo(t, "POST", base+"/ui/release", "alice", url.Values{"id": {id}, "job": {"ui-job"}, "csrf": {csrf}}); code != 200 || !strings.Contains(body, "Released "+id) {
		t.Errorf("release: %d\n%s", code, body)
	}
	if got := activeHolds(t, db, "ui-job"); len(got) != 0 {
		t.Fatalf("holds after the release: %v", got)
	}
	var events []string
	rows, err := db.Query(context.Background(), "SELECT event || ' by ' || actor FROM throttled.audit WHERE hold_id = $1 ORDER BY id", holdNumber(t, id))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var e string
		rows.Scan(&e)
		events = append(events, e)
	}
	rows.Close()
	if strings.Join(events, "; ") != "hold_created by alice; hold_released by alice" {
		t.Errorf("audit of the hold: %v", events)
	}
}

func holdNumber(t *testing.T, id string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimPrefix(id, "h"), 10, 64)
	if err != nil {
		t.Fatalf("hold id %q: %v", id, err)
	}
	return n
}

// POST /v1/resume ends a latched critical pause; with none it says so
// (409), and it needs the pause scope like any pause.
func TestResumeLatchedNeedsALatch(t *testing.T) {
	base, _, _ := confirmPage(t)
	post := func(token string) (int, string) {
		req, _ := http.NewRequest("POST", base+"/v1/resume", strings.NewReader(`{"reason":"load is gone"}`))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := post(""); code != http.StatusUnauthorized {
		t.Fatalf("without a token: %d", code)
	}
	if code, body := post(actionToken); code != http.StatusConflict || !strings.Contains(body, "no latched critical pause") {
		t.Fatalf("with no latch: %d %s", code, body)
	}
}

// The return allow-list is a path prefix on a segment boundary, and dot
// segments cannot step out of it however they are written: the browser
// would follow the redirect to a page outside the allowed prefix (a
// percent-encoded /d/%2e%2e/admin/users once passed with 303).
func TestConfirmPageRefusesReturnsThatEscapeTheAllowList(t *testing.T) {
	base, dashboard, _ := confirmPage(t)
	u, _ := url.Parse(dashboard)
	for _, p := range []string{"/d/../admin/users", "/d/%2e%2e/admin/users", "/d/.%2e/admin/users", "/d/%2E%2E/admin/users"} {
		escape := u.Scheme + "://" + u.Host + p
		code, body, _ := uiDo(t, "GET", base+"/ui/pause?job=ui-job&return="+url.QueryEscape(escape), "alice", nil)
		if code != http.StatusBadRequest || !strings.Contains(body, "dot segments") {
			t.Errorf("return=%s (resolves to /admin/users, outside /d/): %d %s; want 400", escape, code, body)
		}
	}
}
