package signals

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// slow answers as a healthy Prometheus would, each query after d, or not
// at all once the client has gone.
func slow(d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(d):
			answer(w, r)
		case <-r.Context().Done():
		}
	})
}

// The timeout bounds the whole reading: its query, traffic and dating
// query together. Each used to have a timeout of its own, one after
// another: three queries of 700 ms each under a 1 s timeout read fine in
// 2.1 s, and an every = 1s signal was read every 2.1 s at best. Now the
// reading fails as a timeout within the timeout. Real clock: the server
// is real.
func TestPrometheusReadingDeadline(t *testing.T) {
	const timeout, slack = time.Second, 500 * time.Millisecond
	srv := listen(t, "127.0.0.1", slow(700*time.Millisecond))
	sig := absolute("app_value", "app_single")
	sig.Traffic, sig.MinTraffic = "sum(rate(app_requests_total[15s]))", 0.1
	s := (&reader{cfg: PrometheusConfig{Address: srv.URL, Timeout: timeout}}).sampler(t, sig)
	start := time.Now()
	x := read(s)
	took := time.Since(start)
	t.Logf("took %s: %v", took.Round(time.Millisecond), x.Err)
	mustFail(t, x, "timed out after 1s")
	if !errors.Is(x.Err, ErrTimeout) {
		t.Errorf("error %v is not ErrTimeout", x.Err)
	}
	if took > timeout+slack {
		t.Errorf("the reading took %s, want at most the timeout %s (+%s)", took.Round(time.Millisecond), timeout, slack)
	}
}

// The signals due in one round are read together: the round takes as
// long as the slowest reading, not their sum. Three signals of two 300 ms
// queries each took 1.8 s, one after another, under a 1 s timeout.
func TestPrometheusSignalsReadTogether(t *testing.T) {
	const timeout, slack = time.Second, 500 * time.Millisecond
	srv := listen(t, "127.0.0.1", slow(300*time.Millisecond))
	s := (&reader{cfg: PrometheusConfig{Address: srv.URL, Timeout: timeout}}).sampler(t,
		absolute("app_a", "app_a"), absolute("app_b", "app_b"), absolute("app_c", "app_c"))
	start := time.Now()
	got := s.sample(context.Background(), time.Now)
	took := time.Since(start)
	t.Logf("the round took %s", took.Round(time.Millisecond))
	if len(got) != 3 {
		t.Fatalf("%d samples, want 3", len(got))
	}
	for i, x := range got {
		if want := s.signals[i].Name; x.Name != want || x.Err != nil || x.Value != 0.5 {
			t.Errorf("sample %d: got %+v (error %v), want %s 0.5", i, x, x.Err, want)
		}
	}
	if took > timeout+slack {
		t.Errorf("the round took %s, want at most the timeout %s (+%s): the signals one after another", took.Round(time.Millisecond), timeout, slack)
	}
}
