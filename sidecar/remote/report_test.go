package remote

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// tokenServer answers every acquire with one token and each report with
// the next of reports (the last repeated).
func tokenServer(t *testing.T, reports ...int) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/acquire") {
			_, _ = w.Write([]byte(`{"tokens":["t1"],"rate":1,"token_ttl_seconds":300}`))
			return
		}
		n := int(calls.Add(1))
		code := reports[min(n, len(reports))-1]
		w.WriteHeader(code)
		_, _ = w.Write([]byte(`{"error":"token expired: it went unreported past its TTL"}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// A report the sidecar refuses (410, an expired token) is logged and
// counted. Before, the client dropped every answer to a report: a
// refused batch's rows went uncounted and nobody heard of it.
func TestRefusedReportIsLoggedAndCounted(t *testing.T) {
	srv, calls := tokenServer(t, http.StatusGone)
	var logged bytes.Buffer
	c, err := New(Config{BaseURL: srv.URL, Token: "t", Log: hclog.New(&hclog.LoggerOptions{Output: &logged}),
		sleep: func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.Pacer("purge").Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done(10, time.Second, nil)
	if n := c.ReportsFailed(); n != 1 {
		t.Errorf("ReportsFailed = %d; want 1", n)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d reports sent; want 1: a refusal is not retried", n)
	}
	if line := logged.String(); !strings.Contains(line, "[ERROR]") || !strings.Contains(line, "410") || !strings.Contains(line, "job=purge") {
		t.Errorf("log %q; want an error line naming the job and the 410", line)
	}
}

// A report the sidecar cannot take yet (it restarts: 503, then 502) is
// sent again until it is taken, and nothing is counted as failed.
func TestReportIsSentAgainWhileTheSidecarRestarts(t *testing.T) {
	srv, calls := tokenServer(t, http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusOK)
	var waits atomic.Int64
	c, err := New(Config{BaseURL: srv.URL, Token: "t", sleep: func(context.Context, time.Duration) error { waits.Add(1); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.Pacer("purge").Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done(10, time.Second, nil)
	if n := calls.Load(); n != 3 {
		t.Errorf("%d reports sent; want 3, the last taken", n)
	}
	if n := c.ReportsFailed(); n != 0 {
		t.Errorf("ReportsFailed = %d; want 0", n)
	}
	if n := waits.Load(); n != 2 {
		t.Errorf("%d backoffs; want 2", n)
	}
}
