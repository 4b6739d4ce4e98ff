package status

import (
	"testing"
)

func TestCodeOfAStateAlone(t *testing.T) {
	for s, want := range map[JobState]Code{JobRunning: CodeRunning, JobThrottled: CodeHolding, JobPaused: CodeUnavailable, "": CodeUnavailable} {
		if got := CodeOf(s); got != want || (s == JobPaused && got.Go()) {
			t.Errorf("CodeOf(%q) = %s; want %s", s, got, want)
		}
	}
}

// A code that does not fit the state it came with (an older leader wrote
// the state only) gives way to the state's; one that fits stays.
func TestCodeForKeepsOnlyACodeThatFitsTheState(t *testing.T) {
	for _, tc := range []struct {
		s    JobState
		c    Code
		want Code
	}{
		{JobRunning, CodeSlowStart, CodeSlowStart},
		{JobThrottled, CodeCut, CodeCut},
		{JobPaused, CodeStale, CodeStale},
		{JobThrottled, CodeRunning, CodeHolding},  // a stale running code under a throttled state
		{JobPaused, CodeRunning, CodeUnavailable}, // fails closed
		{JobRunning, CodeCritical, CodeRunning},
		{JobPaused, "", CodeUnavailable},
	} {
		if got := CodeFor(tc.s, tc.c); got != tc.want {
			t.Errorf("CodeFor(%s, %q) = %s; want %s", tc.s, tc.c, got, tc.want)
		}
	}
}
