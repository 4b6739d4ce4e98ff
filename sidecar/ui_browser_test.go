package sidecar_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// chromiumPath finds the Debian chromium that make test installs. A
// missing browser fails the test: a run that skipped it would prove
// nothing about the page a person clicks.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH; make test installs it with scripts/ensure-chromium")
	return ""
}

// browser starts headless Chromium for the test, closed at its end, with
// 90 s for everything the test does in it.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(func() { cancel(); cancelBrowser(); cancelAlloc() })
	return ctx
}

// A person behind an SSO proxy follows the jobs dashboard's Pause… link,
// fills the confirm form in a real browser, submits, and lands back on the
// dashboard; the hold exists and the audit log names them.
func TestConfirmPageInHeadlessChromium(t *testing.T) {
	base, dashboard, db := confirmPage(t)
	ctx := browser(t)

	// The SSO proxy's header, as Grafana's auth proxy would set it.
	asAlice := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{userHeader: "alice"}})
		return err
	})
	if err := chromedp.Do(ctx, asAlice,
		chromedp.Navigate(base+"/ui/pause?job=ui-job&return="+url.QueryEscape(dashboard)),
		chromedp.WaitVisible(chromedp.ID("confirm")),
	); err != nil {
		t.Fatalf("browser: open the confirm page: %v", err)
	}
	state, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("state")))
	if err != nil {
		t.Fatalf("browser: read the state: %v", err)
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("reason"), "vacuum of orders running long"),
		chromedp.SetValue(chromedp.ID("ttl"), "45m"),
		chromedp.Click(chromedp.ID("confirm")),
		chromedp.WaitVisible(chromedp.ID("grafana")),
	); err != nil {
		t.Fatalf("browser: confirm the pause: %v", err)
	}
	location, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	landed, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("grafana")))
	if err != nil {
		t.Fatal(err)
	}
	if state == "" {
		t.Error("the page showed no state for the job")
	}
	if location != dashboard || landed != "throttled jobs" {
		t.Errorf("landed on %q (%q); want the dashboard %s", location, landed, dashboard)
	}
	got := activeHolds(t, db, "ui-job")
	if len(got) != 1 || got[0] != "alice: vacuum of orders running long" {
		t.Fatalf("holds after the browser's pause: %v", got)
	}
	var actor, reason string
	var expiresIn time.Duration
	if err := db.QueryRow(context.Background(), `SELECT a.actor, a.reason, h.expires_at - h.created_at FROM throttled.audit a
		JOIN throttled.holds h ON h.id = a.hold_id WHERE a.event = 'hold_created' AND h.scope_value = 'ui-job' ORDER BY a.id DESC LIMIT 1`).Scan(&actor, &reason, &expiresIn); err != nil {
		t.Fatal(err)
	}
	if actor != "alice" || !strings.Contains(reason, "vacuum") || expiresIn != 45*time.Minute {
		t.Errorf("audit: actor %q reason %q ttl %s; want alice, the reason, 45m", actor, reason, expiresIn)
	}

	// A forged POST: a page elsewhere submits the pause form in alice's
	// browser (which the proxy still vouches for), without the CSRF token.
	// The sidecar refuses it and makes no hold.
	forger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><title>cat pictures</title>
<form id="f" method="post" action="%s/ui/pause"><input name="job" value="ui-job"><input name="reason" value="forged"><input name="ttl" value="10m"></form>
<script>document.getElementById("f").submit()</script>`, base)
	}))
	defer forger.Close()
	if err := chromedp.Do(ctx, chromedp.Navigate(forger.URL), chromedp.WaitVisible(chromedp.CSS("body"))); err != nil {
		t.Fatalf("browser: open the forging page: %v", err)
	}
	pgtest.Eventually(t, 10*time.Second, func() error {
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil || !strings.HasPrefix(loc, base) {
			return fmt.Errorf("the forged form has not been submitted yet (at %q, %v)", loc, err)
		}
		return nil
	})
	body, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
	if err != nil {
		t.Fatal(err)
	}
	// Refused on its origin before the token is even read (the rules
	// without a browser test each check on its own).
	if !strings.Contains(body, "refused: the form was posted from "+forger.URL) {
		t.Errorf("the forged POST's answer does not say it was refused: %q", body)
	}
	if got := activeHolds(t, db, "ui-job"); len(got) != 1 || strings.Contains(got[0], "forged") {
		t.Fatalf("holds after the forged POST: %v; want only alice's", got)
	}
}

// The Pause action of a Grafana visualization is a fetch from the
// Grafana page to POST /v1/holds. A real browser lets it through from a
// Grafana origin in grafana.return_urls (the hold exists, made by the
// action's token), and blocks it from any other origin: the preflight is
// refused, the POST never sent, no hold made.
func TestGrafanaActionCrossOriginInHeadlessChromium(t *testing.T) {
	base, dashboard, db := confirmPage(t)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `<!doctype html><title>elsewhere</title>`)
	}))
	defer other.Close()
	ctx := browser(t)
	// What Grafana's fetch action sends: JSON, the token in a header.
	action := func(job string) string {
		return fmt.Sprintf(`fetch(%q, {method: "POST", headers: {"Content-Type": "application/json", "Authorization": "Bearer %s"},
			body: JSON.stringify({scope: "job:%s", reason: "paused from a Grafana action", ttl: "10m"})})
			.then(r => "status " + r.status, e => "blocked: " + e)`, base+"/v1/holds", actionToken, job)
	}
	for _, tc := range []struct {
		page, job, want string
		holds           int
	}{
		{dashboard, "ui-job", "status 201", 1},
		{other.URL + "/", "ui-job-2", "blocked: TypeError", 0},
	} {
		if err := chromedp.Do(ctx, chromedp.Navigate(tc.page)); err != nil {
			t.Fatalf("browser: open %s: %v", tc.page, err)
		}
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](action(tc.job), chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("browser: run the action from %s: %v", tc.page, err)
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("action from %s: %q; want %q", tc.page, got, tc.want)
		}
		if hs := activeHolds(t, db, tc.job); len(hs) != tc.holds {
			t.Errorf("action from %s: holds on %s: %v; want %d", tc.page, tc.job, hs, tc.holds)
		} else if tc.holds == 1 && !strings.HasPrefix(hs[0], "token:grafana-actions: ") {
			t.Errorf("the action's hold: %q; want it made by token:grafana-actions", hs[0])
		}
	}
}
