package hold

import (
	"strings"
	"testing"
	"time"
)

// One rule for a hold's life: an unset default is filled under the max,
// a set default over the max is refused, and a request's TTL is checked
// against the same bounds wherever the hold is made.
func TestTTLPolicy(t *testing.T) {
	for _, tc := range []struct {
		p          TTLPolicy
		want       string // Check's error, "" for none
		def, max   time.Duration
		ask, got   time.Duration
		refuseWith string // TTL(ask)'s error, "" for none
	}{
		{p: TTLPolicy{}, def: time.Hour, max: 24 * time.Hour, ask: 0, got: 0},
		{p: TTLPolicy{Max: 30 * time.Minute}, def: 30 * time.Minute, max: 30 * time.Minute, ask: time.Hour, refuseWith: "TTL 1h0m0s exceeds the maximum 30m0s"},
		{p: TTLPolicy{Default: 15 * time.Minute}, def: 15 * time.Minute, max: 24 * time.Hour, ask: 0, got: 15 * time.Minute},
		{p: TTLPolicy{Default: 15 * time.Minute, Max: time.Hour}, def: 15 * time.Minute, max: time.Hour, ask: 2 * time.Minute, got: 2 * time.Minute},
		{p: TTLPolicy{Default: 2 * time.Hour, Max: time.Hour}, want: "default TTL 2h0m0s exceeds max TTL 1h0m0s"},
		{p: TTLPolicy{Default: 500 * time.Millisecond}, want: "default TTL 500ms is under the shortest hold, 1s"},
		{p: TTLPolicy{Max: -time.Minute}, want: "max TTL -1m0s is under the shortest hold, 1s"},
		{p: TTLPolicy{Max: time.Hour}, def: time.Hour, max: time.Hour, ask: -time.Second, refuseWith: "TTL -1s is negative"},
		{p: TTLPolicy{Max: time.Hour}, def: time.Hour, max: time.Hour, ask: time.Millisecond, refuseWith: "TTL 1ms is under the shortest accepted, 1s"},
	} {
		err := tc.p.Check()
		if tc.want != "" {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%+v.Check() = %v; want %q", tc.p, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v.Check() = %v", tc.p, err)
			continue
		}
		if f := tc.p.Filled(); f.Default != tc.def || f.Max != tc.max {
			t.Errorf("%+v.Filled() = %+v; want default %s, max %s", tc.p, f, tc.def, tc.max)
		}
		got, err := tc.p.TTL(tc.ask)
		switch {
		case tc.refuseWith != "" && (err == nil || !strings.Contains(err.Error(), tc.refuseWith)):
			t.Errorf("%+v.TTL(%s) = %s, %v; want %q", tc.p, tc.ask, got, err, tc.refuseWith)
		case tc.refuseWith == "" && (err != nil || got != tc.got):
			t.Errorf("%+v.TTL(%s) = %s, %v; want %s", tc.p, tc.ask, got, err, tc.got)
		}
	}
}
