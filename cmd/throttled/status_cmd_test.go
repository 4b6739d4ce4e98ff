package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/throttled/throttled/sidecar/api"
)

// status --addr prints, leader or not, each configured job with where
// its time went in that process.
func TestStatusPrintsWhereEachJobsTimeWent(t *testing.T) {
	jobs := []api.Job{
		{Job: "purge", State: "throttled", Code: "cut", Rate: 0.5, WhySlow: "ran 4m10s: 81 % limited by foreground_latency, 12 % at full rate, 7 % slow start"},
		{Job: "archive", State: "paused", Code: "unavailable"},
	}
	for _, st := range []api.Status{
		{Leader: true, ConfigVersion: "v1", Jobs: jobs, Decision: &api.Decision{Mode: "throttled", Budget: 0.5, Binding: "foreground_latency", Reason: "cut"}},
		{Leader: false, ConfigVersion: "v1", Jobs: jobs},
	} {
		var out bytes.Buffer
		printSidecarStatus(&out, st)
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var purge, archive string
		for _, l := range lines {
			switch {
			case strings.HasPrefix(l, "purge "):
				purge = l
			case strings.HasPrefix(l, "archive "):
				archive = l
			}
		}
		if !strings.Contains(out.String(), "WHERE THE TIME WENT") || !strings.HasSuffix(purge, jobs[0].WhySlow) ||
			!strings.Contains(purge, "cut") || !strings.HasSuffix(archive, " -") {
			t.Errorf("leader %v: status:\n%s", st.Leader, out.String())
		}
		if st.Leader != strings.Contains(out.String(), "mode: throttled") {
			t.Errorf("leader %v: the decision shown or not:\n%s", st.Leader, out.String())
		}
	}
}
