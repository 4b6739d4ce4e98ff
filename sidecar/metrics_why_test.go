package sidecar_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/status"
)

// A held job's throttled_jobs_state names the hold's source in its why
// label, never the hold's ID: every hold would otherwise start a series of
// its own, without bound over a cluster's life. The ID stays in
// throttled_holds_info, one series per active hold. On the old code the
// label read why="hold h1". Every why the metrics and the API give is a
// word of status.Whys: on the old code throttled_jobs_state had words of
// its own ("no valid allocation", "binding primary_load").
func TestJobStateWhyNamesTheHoldsSourceNotItsID(t *testing.T) {
	hs := admitServer(t, false)
	waitReady(t, hs.URL)
	var ids []string
	for i := range 2 {
		code, body := probe(t, "POST", hs.URL+"/v1/holds", admitPause, fmt.Sprintf(`{"scope":"job:a","ttl":"30m","reason":"look %d"}`, i))
		var h api.Hold
		if err := json.Unmarshal([]byte(body), &h); err != nil || code != http.StatusCreated {
			t.Fatalf("pause: %d %s", code, body)
		}
		ids = append(ids, h.ID)
		// The pair outlives the test: the next test's job a must not be
		// held.
		t.Cleanup(func() {
			if code, body := probe(t, "DELETE", hs.URL+"/v1/holds/"+h.ID+"?reason=done", admitPause, ""); code != http.StatusOK {
				t.Errorf("release %s: %d %s", h.ID, code, body)
			}
		})
	}
	state := regexp.MustCompile(`(?m)^throttled_jobs_state\{.*$`)
	pgtest.Eventually(t, 15*time.Second, func() error {
		_, metrics := probe(t, "GET", hs.URL+"/metrics", admitRead, "")
		lines := state.FindAllString(metrics, -1)
		if !strings.Contains(strings.Join(lines, "\n"), `throttled_jobs_state{state="paused",throttled_job="a",why="hold:manual"} 1`) {
			return fmt.Errorf("want job a paused by hold:manual; have %q", lines)
		}
		for _, id := range ids {
			for _, l := range lines {
				if strings.Contains(l, `"`+id+`"`) || strings.Contains(l, " "+id+`"`) {
					t.Fatalf("throttled_jobs_state carries hold %s: %s", id, l)
				}
			}
			if !strings.Contains(metrics, `throttled_holds_info{actor="token:oncall",id="`+id+`"`) {
				return fmt.Errorf("throttled_holds_info lacks hold %s", id)
			}
		}
		if !strings.Contains(metrics, "# HELP throttled_jobs_state") || !strings.Contains(metrics, "hold:<source>") {
			return fmt.Errorf("throttled_jobs_state's help does not say why is the hold's source")
		}
		return nil
	})
	// Every why the metrics and the API give, for every job, is a word of
	// the one set (status.Whys): the state's, the seconds counted, the
	// API's limited_seconds.
	_, metrics := probe(t, "GET", hs.URL+"/metrics", admitRead, "")
	whys := regexp.MustCompile(`\bwhy="([^"]*)"`).FindAllStringSubmatch(metrics, -1)
	if len(whys) == 0 {
		t.Fatal("no why label in /metrics")
	}
	for _, m := range whys {
		if !slices.Contains(status.Whys(), status.Why(m[1])) {
			t.Errorf("/metrics: why=%q is not a word of status.Whys", m[1])
		}
	}
	code, body := probe(t, "GET", hs.URL+"/v1/jobs", admitRead, "")
	var list []api.Job
	if err := json.Unmarshal([]byte(body), &list); err != nil || code != http.StatusOK || len(list) == 0 {
		t.Fatalf("jobs: %d %s", code, body)
	}
	for _, j := range list {
		for w := range j.LimitedSeconds {
			if !slices.Contains(status.Whys(), status.Why(w)) {
				t.Errorf("/v1/jobs: job %s limited_seconds has %q, not a word of status.Whys", j.Job, w)
			}
		}
	}
}
