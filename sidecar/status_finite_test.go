package sidecar

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// statusOf is a leader's /v1/status answer built as the handler builds
// it, from one sample reading value, a budget, and a job's rate and its
// seconds at a limit.
func statusOf(value, budget, rate, limited float64) api.Status {
	at := time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC)
	snap := signals.Snapshot{At: at, MaxAge: 3 * time.Second, Samples: []signals.Sample{
		{Name: "custom_value", Value: value, Raw: value, At: at},
		{Name: signals.PrimaryLoad, Value: 0.5, Raw: 0.5, At: at},
	}}
	return api.Status{Leader: true, ConfigVersion: "v1",
		Jobs:     []api.Job{{Job: "a", Rate: rate, Holds: []string{}, LimitedSeconds: map[string]float64{"custom_value": limited}}},
		Decision: &api.Decision{Mode: "running", Budget: budget, DecidedAt: at, Signals: signalsJSON(snap, func(now time.Time, x signals.Sample) string { return throttle.Unfresh(now, x, snap.MaxAge) })}}
}

// Whatever float a sample, a budget or a rate holds, /v1/status answers
// 200 with a body that is one JSON object: a value JSON cannot carry is
// null with an error (a sample's) or its nearest finite reading (the
// others), and every finite one comes back exactly. A NaN once made the
// encoder fail after the 200 was written, leaving the body empty.
func FuzzStatusFinite(f *testing.F) {
	for _, v := range []float64{math.NaN(), math.Inf(-1), math.Inf(1), 0, -0.0, 5e-324, math.MaxFloat64, 42.5} {
		f.Add(math.Float64bits(v), math.Float64bits(math.Inf(1)), math.Float64bits(v), math.Float64bits(math.NaN()))
	}
	f.Fuzz(func(t *testing.T, value, budget, rate, limited uint64) {
		in := []float64{math.Float64frombits(value), math.Float64frombits(budget), math.Float64frombits(rate), math.Float64frombits(limited)}
		rec := httptest.NewRecorder()
		writeFiniteJSON(rec, http.StatusOK, statusOf(in[0], in[1], in[2], in[3]))
		body := rec.Body.Bytes()
		if rec.Code != http.StatusOK || len(body) == 0 || !json.Valid(body) {
			t.Fatalf("%v: %d %q; want 200 and one JSON object", in, rec.Code, body)
		}
		var got api.Status
		if err := json.Unmarshal(body, &got); err != nil || got.Decision == nil || len(got.Decision.Signals) != 2 || len(got.Jobs) != 1 {
			t.Fatalf("%v: %v: %s", in, err, body)
		}
		sig := got.Decision.Signals[0]
		switch finite := !math.IsNaN(in[0]) && !math.IsInf(in[0], 0); {
		case finite && (sig.Value == nil || *sig.Value != in[0] || sig.Error != ""):
			t.Fatalf("%v: signal %+v; want its value back", in, sig)
		case !finite && (sig.Value != nil || !strings.Contains(sig.Error, "not a finite number")):
			t.Fatalf("%v: signal %+v; want no value and why", in, sig)
		}
		for name, pair := range map[string][2]float64{"budget": {got.Budget, in[1]}, "rate": {got.Jobs[0].Rate, in[2]},
			"limited seconds": {got.Jobs[0].LimitedSeconds["custom_value"], in[3]}} {
			if pair[0] != finiteFloat(pair[1]) {
				t.Fatalf("%v: %s reads %v; want %v", in, name, pair[0], finiteFloat(pair[1]))
			}
		}
	})
}

// An answer that cannot be encoded at all is a 500 with the API's error
// body, never a 200 with an empty one; a pointer to a float JSON cannot
// carry is null, wherever it sits.
func TestFiniteJSONNeverAnswersAnEmptyBody(t *testing.T) {
	rec := httptest.NewRecorder()
	writeFiniteJSON(rec, http.StatusOK, map[string]any{"c": make(chan int)})
	var e api.Error
	if err := json.Unmarshal(rec.Body.Bytes(), &e); rec.Code != http.StatusInternalServerError || err != nil || !strings.Contains(e.Error, "cannot encode") {
		t.Fatalf("unencodable: %d %q (%v); want 500 with an error", rec.Code, rec.Body.String(), err)
	}
	nan := math.NaN()
	type inner struct {
		P *float64           `json:"p"`
		M map[string]float64 `json:"m"`
		A []any              `json:"a"`
	}
	rec = httptest.NewRecorder()
	writeFiniteJSON(rec, http.StatusOK, map[string]inner{"x": {P: &nan, M: map[string]float64{"k": math.Inf(-1)}, A: []any{math.NaN(), "s"}}})
	if want := `{"x":{"p":null,"m":{"k":-1.7976931348623157e+308},"a":[0,"s"]}}` + "\n"; rec.Code != http.StatusOK || rec.Body.String() != want {
		t.Fatalf("got %d %q; want 200 %q", rec.Code, rec.Body.String(), want)
	}
	if !math.IsNaN(nan) {
		t.Fatal("the caller's float was rewritten")
	}
}
