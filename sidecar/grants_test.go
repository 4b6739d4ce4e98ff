package sidecar

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A token expires when its TTL runs out, on its own timer: before, its
// batch was ended only by the next acquire (expireGrants), so a worker
// reporting 310 s after its acquire (TTL 300 s) with no acquire between
// was answered 200. Its slot is freed and its batch counted as failed at
// the TTL, and a report after that finds it expired.
func TestGrantExpiresAtItsTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var gotErr error
		var gotAt, expiredAt time.Time
		b := newGrantBook(300*time.Second, func(string, *grant) {
			mu.Lock()
			expiredAt = time.Now()
			mu.Unlock()
		})
		t0 := time.Now()
		b.add("tok", &grant{job: "a", at: t0, worker: "w1", done: func(rows int64, took time.Duration, err error) {
			mu.Lock()
			gotErr, gotAt = err, time.Now()
			mu.Unlock()
		}})

		time.Sleep(300*time.Second - time.Millisecond)
		synctest.Wait()
		if !b.has("tok") {
			t.Fatal("the token ended before its TTL")
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if !errors.Is(gotErr, errTokenExpired) || gotAt.Sub(t0) != 300*time.Second {
			t.Fatalf("batch ended with %v after %s; want errTokenExpired at 5m0s, its TTL", gotErr, gotAt.Sub(t0))
		}
		if expiredAt.Sub(t0) != 300*time.Second {
			t.Errorf("the expiry was heard after %s; want 5m0s", expiredAt.Sub(t0))
		}
		if n := b.out(); n != 0 {
			t.Errorf("%d tokens out after the expiry; want 0", n)
		}
		time.Sleep(10 * time.Second) // the late report, 310 s after the acquire
		if g, end, _ := b.begin("tok", "a", func(*grant) error { return nil }); g != nil || end != tokenExpired {
			t.Errorf("late report: grant %v, end %d; want none, tokenExpired", g, end)
		}
	})
}

// A reported token is never expired after (its timer stops), and a
// second report finds it reported.
func TestGrantReportedDoesNotExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		b := newGrantBook(time.Minute, nil)
		b.add("tok", &grant{job: "a", at: time.Now(), done: func(int64, time.Duration, error) { calls++ }})
		time.Sleep(30 * time.Second)
		g, end, err := b.begin("tok", "a", func(*grant) error { return nil })
		if g == nil || end != tokenOut || err != nil {
			t.Fatalf("report: %v %d %v; want the grant", g, end, err)
		}
		b.finish("tok", tokenReported)
		g.done(1, time.Second, nil)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if calls != 1 {
			t.Errorf("done called %d times; want once, by the report", calls)
		}
		if _, end, _ := b.begin("tok", "a", func(*grant) error { return nil }); end != tokenReported {
			t.Errorf("second report: end %d; want tokenReported", end)
		}
	})
}

// A token whose report is storing its end does not expire meanwhile: a
// second report is told to retry, and the token stays out. If the report
// is abandoned (its end could not be stored) after the token's TTL, the
// token expires then, as a failed batch; if it finishes, the token is
// reported and never expires.
func TestGrantReportInFlightDefersItsExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var errs []error
		b := newGrantBook(time.Minute, nil)
		accept := func(*grant) error { return nil }
		for _, tok := range []string{"abandoned", "finished"} {
			b.add(tok, &grant{job: "a", at: time.Now(), done: func(_ int64, _ time.Duration, err error) { errs = append(errs, err) }})
		}
		time.Sleep(59 * time.Second)
		for _, tok := range []string{"abandoned", "finished"} {
			if g, end, _ := b.begin(tok, "a", accept); g == nil || end != tokenOut {
				t.Fatalf("%s: report: %v %d; want the grant", tok, g, end)
			}
			if g, end, _ := b.begin(tok, "a", accept); g != nil || end != tokenBusy {
				t.Errorf("%s: a second report while the first stores: %v %d; want tokenBusy", tok, g, end)
			}
		}
		time.Sleep(2 * time.Second) // past the TTL, the reports still storing
		synctest.Wait()
		if n := b.out(); n != 2 || len(errs) != 0 {
			t.Fatalf("%d out, batches ended %v, with reports storing past the TTL; want both out, none ended", n, errs)
		}
		b.finish("finished", tokenReported)
		b.abandon("abandoned", true)
		if len(errs) != 1 || !errors.Is(errs[0], errTokenExpired) || b.out() != 0 {
			t.Fatalf("after the abandon: batches ended %v, %d out; want the abandoned token expired, none out", errs, b.out())
		}
		if _, end, _ := b.begin("abandoned", "a", accept); end != tokenExpired {
			t.Errorf("the retry of the abandoned report: end %d; want tokenExpired", end)
		}
		if _, end, _ := b.begin("finished", "a", accept); end != tokenReported {
			t.Errorf("a report again of the finished one: end %d; want tokenReported", end)
		}
	})
}
