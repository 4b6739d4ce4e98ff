package sidecar_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/sidecar/api"
)

// workPair runs a sidecar on the package's pair with jobs js, the work
// token workToken and reads open; it returns its URL once ready.
func workPair(t *testing.T, js ...config.Job) string {
	t.Helper()
	client, _ := coordinatedClient(t)
	cfg := configWith("v1", js...)
	cfg.Tokens = []config.Token{{Name: "worker", Secret: workToken, Scopes: []config.Scope{config.ScopeWork}}}
	srv, err := sidecar.New(client, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	waitReady(t, hs.URL)
	return hs.URL
}

// acquireOne takes one token for job, waiting up to 5 s.
func acquireOne(t *testing.T, base, job, worker string) string {
	t.Helper()
	var tokens []string
	pgtest.Eventually(t, 20*time.Second, func() error {
		code, body := probe(t, "POST", base+"/v1/jobs/"+job+"/acquire", workToken, fmt.Sprintf(`{"n":1,"max_wait":"2s","worker":%q}`, worker))
		var resp api.AcquireResponse
		if code != http.StatusOK || json.Unmarshal([]byte(body), &resp) != nil || len(resp.Tokens) != 1 {
			return fmt.Errorf("acquire %s: %d %s", job, code, body)
		}
		tokens = resp.Tokens
		return nil
	})
	return tokens[0]
}

// metricValue is the line of the metrics' text that starts with series.
func metricLine(t *testing.T, base, series string) string {
	t.Helper()
	_, metrics := probe(t, "GET", base+"/metrics", "", "")
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, series+" ") {
			return l
		}
	}
	return ""
}

// A report claims no more rows than its batch could hold: its batch_size,
// else the job's max_batch_size when the token was granted, else a
// billion. Two reports of math.MaxInt64 rows made throttled_jobs_rows_total
// read -2 on the old code, which took them (200). A refused report takes
// nothing: its token still holds its slot, and a true report of it counts.
func TestReportRefusesMoreRowsThanTheBatchCouldHold(t *testing.T) {
	base := workPair(t, config.Job{Name: "a", Weight: 1, MaxRate: 10}, config.Job{Name: "b", Weight: 1, MaxRate: 10, MaxBatchSize: 40})
	report := func(job, body string) (int, string) {
		t.Helper()
		return probe(t, "POST", base+"/v1/jobs/"+job+"/report", workToken, body)
	}
	const huge = "9223372036854775807"
	for range 2 {
		tok := acquireOne(t, base, "a", "w1")
		if code, body := report("a", `{"token":"`+tok+`","rows":`+huge+`,"duration_ms":5}`); code != http.StatusBadRequest ||
			!strings.Contains(body, "rows = "+huge) || !strings.Contains(body, "1000000000") {
			t.Fatalf("rows = MaxInt64: %d %s; want 400 naming rows and the bound", code, body)
		}
		if code, body := report("a", `{"token":"`+tok+`","rows":5,"duration_ms":5}`); code != http.StatusOK {
			t.Fatalf("the same token, reported truly: %d %s", code, body)
		}
	}
	if l := metricLine(t, base, `throttled_jobs_rows_total{throttled_job="a"}`); !strings.HasSuffix(l, " 10") {
		t.Errorf("rows of a: %q; want 10", l)
	}

	// b's max_batch_size is 40.
	tok := acquireOne(t, base, "b", "w1")
	for _, tc := range []struct{ body, says string }{
		{`"rows":41`, "rows = 41: more than the batch could hold; at most 40, the job's max_batch_size"},
		{`"rows":10,"batch_size":50`, "batch_size = 50: at most 40"},
		{`"rows":30,"batch_size":20`, "rows = 30: more than the batch could hold; at most 20, the batch_size reported"},
		{`"rows":` + huge + `,"batch_size":40`, "at most 40"},
	} {
		if code, body := report("b", `{"token":"`+tok+`","duration_ms":5,`+tc.body+`}`); code != http.StatusBadRequest || !strings.Contains(body, tc.says) {
			t.Errorf("%s: %d %s; want 400 saying %q", tc.body, code, body, tc.says)
		}
	}
	if code, body := report("b", `{"token":"`+tok+`","rows":40,"batch_size":40,"duration_ms":5}`); code != http.StatusOK {
		t.Fatalf("a full batch of 40: %d %s", code, body)
	}
	if l := metricLine(t, base, `throttled_jobs_rows_total{throttled_job="b"}`); !strings.HasSuffix(l, " 40") {
		t.Errorf("rows of b: %q; want 40", l)
	}
}
