package hold

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/throttled/throttled/internal/textsafe"
)

// Issue 33, point 1: a reason or an actor with a newline forged a row of
// `throttled holds` and of the audit log, and one with ESC rewrote the
// terminal. Storable refuses every character that can do so, naming the
// character and where it is, and accepts ordinary text in any script.
func TestStorableRefusesWhatForgesALine(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"deploy\nh99  all  pause  manual  token:admin  23h59m0s  FORGED LINE", "control character U+000A at byte 6"},
		{"mallory\r2026-12-05T23:40:00Z  hold_released", "control character U+000D at byte 7"},
		{"a\tb", "control character U+0009 at byte 1"},
		{"\x1b[2K\r\x1b[1A\x1b[2Kansi \x1b[31mRED\x1b[0m \x1b]0;title\a", "control character U+001B at byte 0"},
		{"del\x7f", "control character U+007F at byte 3"},
		{"csi \u009b31m", "control character U+009B at byte 4"},
		{"nel \u0085", "control character U+0085 at byte 4"},
		{"ls \u2028 forged", "line separator U+2028 at byte 3"},
		{"ps \u2029", "paragraph separator U+2029 at byte 3"},
		{"evil \u202egnp.exe", "bidirectional control U+202E at byte 5"},
		{"\u202a", "bidirectional control U+202A at byte 0"},
		{"iso \u2066x\u2069", "bidirectional control U+2066 at byte 4"},
		{"pdi \u2069", "bidirectional control U+2069 at byte 4"},
		{"a\x00b", "NUL"},
		{"a\xffb", "not valid UTF-8"},
	} {
		err := Storable(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Storable(%q) = %v; want an error saying %q", tc.in, err, tc.want)
		}
	}
	for _, ok := range []string{"", "deploy 4211", "café — naïve", "日本語の理由", "emoji 🚧", `C:\tmp\n is a path`, "nbsp\u00a0here", "hebrew שלום", "arabic مرحبا"} {
		if err := Storable(ok); err != nil {
			t.Errorf("Storable(%q) = %v; want it accepted", ok, err)
		}
	}
}

// Every door that checks a hold's request checks its reason and actor so,
// and names the field.
func TestHoldCheckRefusesControlCharactersByField(t *testing.T) {
	r := Request{Scope: AllJobs(), Source: SourceCLI, Reason: "deploy\nFORGED", Actor: "mallory\x1b]0;t\a"}
	_, err := r.Check(TTLPolicy{Default: time.Hour, Max: 24 * time.Hour})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "reason: control character U+000A at byte 6; reasons and actors are one printable line") ||
		!strings.Contains(err.Error(), "actor: control character U+001B at byte 7") {
		t.Fatalf("Check = %v; want ErrInvalid naming the reason's and the actor's character", err)
	}
}

// Issue 33, point 6: a ratio of 1e-320 (or 5e-324) was taken as a live
// override; the job's rate became 1e-321 while the reason said it ran. A
// ratio under MinRatio is refused, and the error says the smallest
// accepted and that a pause is asked for as one. A TTL of 1ns reached the
// database and came back a 500 with its check constraint; 999µs was
// accepted. Every TTL under a second is refused before any query.
func TestHoldCheckRefusesDenormalRatiosAndSubSecondTTLs(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Request
		want string
	}{
		{"denormal ratio", Request{Ratio: 1e-320}, "ratio 1e-320 is below the smallest accepted, 0.001"},
		{"smallest denormal", Request{Ratio: 5e-324}, "ratio 5e-324 is below the smallest accepted, 0.001"},
		{"just under the floor", Request{Ratio: 0.000999}, "place a pause (throttled pause, or ratio 0)"},
		{"1ns", Request{TTL: time.Nanosecond}, "TTL 1ns is under the shortest accepted, 1s"},
		{"999µs", Request{TTL: 999 * time.Microsecond}, "TTL 999µs is under the shortest accepted, 1s"},
		{"999ms", Request{TTL: 999 * time.Millisecond}, "TTL 999ms is under the shortest accepted"},
	} {
		tc.r.Scope, tc.r.Source, tc.r.Reason = AllJobs(), SourceCLI, "x"
		if _, err := tc.r.Check(TTLPolicy{Default: time.Hour, Max: 24 * time.Hour}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Check = %v; want ErrInvalid saying %q", tc.name, err, tc.want)
		}
	}
	for _, r := range []Request{{Ratio: MinRatio}, {Ratio: 0.3}, {Ratio: 1}, {Ratio: 0}, {TTL: time.Second}, {TTL: 0}} {
		r.Scope, r.Source, r.Reason = AllJobs(), SourceCLI, "x"
		if _, err := r.Check(TTLPolicy{Default: time.Hour, Max: 24 * time.Hour}); err != nil {
			t.Errorf("Check(ratio %v, TTL %s) = %v; want it accepted", r.Ratio, r.TTL, err)
		}
	}
}

// FuzzStorable: whatever Storable accepts is valid UTF-8 with no character
// that breaks or reorders a line, and whatever the text, textsafe.Line
// prints it as one line of graphic characters that says the same when
// nothing needed escaping.
func FuzzStorable(f *testing.F) {
	for _, s := range []string{"deploy", "deploy\nh99 FORGED", "\x1b[31mRED\x1b[0m", "\u202egnp", "\u2028", "\u009b", "a\xffb", "a\x00b", "日本\t語", `back\slash`, "\u200b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if Storable(s) == nil {
			if !utf8.ValidString(s) {
				t.Fatalf("Storable accepted invalid UTF-8 %q", s)
			}
			for i, r := range s {
				if r == 0 || unicode.IsControl(r) || textsafe.Refused(r) {
					t.Fatalf("Storable accepted %q with %U at byte %d", s, r, i)
				}
			}
		}
		line := textsafe.Line(s)
		if !utf8.ValidString(line) {
			t.Fatalf("Line(%q) = %q: not valid UTF-8", s, line)
		}
		for _, r := range line {
			if !unicode.IsGraphic(r) || textsafe.Refused(r) {
				t.Fatalf("Line(%q) = %q: holds %U", s, line, r)
			}
		}
		if textsafe.Problem(s) == "" && utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsGraphic(r) }) < 0 && line != s {
			t.Fatalf("Line(%q) = %q: changed printable text", s, line)
		}
	})
}

// FuzzHoldRequestBounds: whatever ratio and TTL a request carries (a
// denormal, NaN, an infinity, a nanosecond), a request Check accepts has
// a ratio of 0 or from MinRatio to 1 and a TTL from MinTTL to
// the maximum, and one it refuses says which field.
func FuzzHoldRequestBounds(f *testing.F) {
	for _, seed := range []struct {
		ratio float64
		ttl   int64
	}{{1e-320, int64(time.Hour)}, {5e-324, int64(time.Hour)}, {0.5, 1}, {0.001, int64(999 * time.Microsecond)}, {0, int64(time.Second)}, {1, 0}} {
		f.Add(seed.ratio, seed.ttl)
	}
	f.Fuzz(func(t *testing.T, ratio float64, ttl int64) {
		r := Request{Scope: Scope{Kind: ScopeAllJobs}, Source: SourceManual, Reason: "fuzz", Ratio: ratio, TTL: time.Duration(ttl)}
		got, err := r.Check(TTLPolicy{Default: time.Hour, Max: 24 * time.Hour})
		if err != nil {
			if !strings.Contains(err.Error(), "ratio") && !strings.Contains(err.Error(), "TTL") {
				t.Fatalf("ratio %v, TTL %s refused without naming the field: %v", ratio, time.Duration(ttl), err)
			}
			return
		}
		if ratio != 0 && !(ratio >= MinRatio && ratio <= 1) {
			t.Fatalf("ratio %v accepted", ratio)
		}
		if got < MinTTL || got > 24*time.Hour {
			t.Fatalf("TTL %s accepted as %s", time.Duration(ttl), got)
		}
	})
}
