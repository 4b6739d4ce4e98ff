package sidecar_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar/api"
)

// A remote worker that acquires and never reports holds its in-flight
// slot until the token expires. Meanwhile the job reads running at its
// rate and acquire answers 429: both must say why, naming the worker, the
// token's age and its time left. On the old code the 429's reason and the
// job's were both "".
func TestUnreportedTokensAreTheReasonAcquireWaits(t *testing.T) {
	base := workPair(t, config.Job{Name: "a", Weight: 1, MaxRate: 10})
	var first api.AcquireResponse
	pgtest.Eventually(t, 20*time.Second, func() error {
		code, body := probe(t, "POST", base+"/v1/jobs/a/acquire", workToken, `{"n":1,"max_wait":"2s","worker":"w-remote-7"}`)
		if code != http.StatusOK || json.Unmarshal([]byte(body), &first) != nil || len(first.Tokens) != 1 {
			return fmt.Errorf("acquire: %d %s", code, body)
		}
		return nil
	})
	if first.TokenTTLSeconds != 300 {
		t.Errorf("token_ttl_seconds %v; want 300, the grant's lifetime", first.TokenTTLSeconds)
	}
	// No batch has reported yet: the job's in-flight cap is 1, and the
	// token holds it.
	const says = "waiting for 1 unreported grant from worker w-remote-7 (acquired "
	code, body := probe(t, "POST", base+"/v1/jobs/a/acquire", workToken, `{"n":1,"max_wait":"1s","worker":"w-other"}`)
	var th api.Throttled
	if code != http.StatusTooManyRequests || json.Unmarshal([]byte(body), &th) != nil || !strings.Contains(th.Reason, says) || !strings.Contains(th.Reason, "expires in 4m") {
		t.Fatalf("acquire behind an unreported token: %d %s; want 429 whose reason says %q", code, body, says)
	}
	// Once the job is starved, its own status names the tokens too: the
	// 429 says so once. Before, the clause came twice ("waiting for 1
	// unreported grant …; waiting for 1 unreported grant …").
	code, body = probe(t, "POST", base+"/v1/jobs/a/acquire", workToken, `{"n":1,"max_wait":"1s","worker":"w-other"}`)
	if code != http.StatusTooManyRequests || json.Unmarshal([]byte(body), &th) != nil || strings.Count(th.Reason, "unreported grant") != 1 {
		t.Fatalf("second acquire behind an unreported token: %d %s; want 429 naming the token once", code, body)
	}
	code, body = probe(t, "GET", base+"/v1/jobs/a", "", "")
	var job api.Job
	if code != http.StatusOK || json.Unmarshal([]byte(body), &job) != nil || !strings.Contains(job.Reason, says) || !strings.Contains(job.Reason, "expires in 4m") {
		t.Fatalf("GET /v1/jobs/a while acquire waits: %d %s; want the reason to say %q", code, body, says)
	}
	if job.State == "paused" {
		t.Errorf("job state %q: an unreported token slows the job, it does not pause it", job.State)
	}

	// Reported: the slot is free, the next acquire is served and the
	// reason says nothing of tokens.
	if code, body := probe(t, "POST", base+"/v1/jobs/a/report", workToken, `{"token":"`+first.Tokens[0]+`","rows":1,"duration_ms":5}`); code != http.StatusOK {
		t.Fatalf("report: %d %s", code, body)
	}
	tok := acquireOne(t, base, "a", "w-remote-7")
	if _, body := probe(t, "GET", base+"/v1/jobs/a", "", ""); strings.Contains(body, "unreported") {
		t.Errorf("after the report and a served acquire, the job still names unreported tokens: %s", body)
	}
	if code, body := probe(t, "POST", base+"/v1/jobs/a/report", workToken, `{"token":"`+tok+`","rows":1,"duration_ms":5}`); code != http.StatusOK {
		t.Fatalf("report: %d %s", code, body)
	}
}
