package sidecar

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"time"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request, _ config.Token) {
	writeJSON(w, http.StatusOK, api.Alive{Status: "alive"})
}

// readyz: configuration loaded, holds confirmed (database reachable), for
// the leader fresh samples of the primary, and every configured job holding
// a valid allocation, so a check after a 200 here never answers 500 for
// want of one.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request, _ config.Token) {
	// /readyz answers anyone (a kubelet carries no token): its problems
	// are fixed words, never a reason text, which can carry a database's
	// error, an address or a hold's details. /v1/status has them.
	var problems []string
	if hs := s.client.HoldWatcher().Applying(time.Now(), ""); len(hs) > 0 && hs[0].ID == holds.UnconfirmedHoldID {
		problems = append(problems, "the holds cannot be read: every job is paused until they can (details in /v1/status)")
	}
	if s.client.Leader() {
		snap := s.client.Snapshot()
		if l, ok := snap.Get(signals.PrimaryLoad, nil); !ok || l.Err != nil || snap.Stale(l) {
			problems = append(problems, "no fresh sample of the primary")
		}
	}
	// Ready means /check can answer: a job still waiting for its first
	// allocation (or whose lease lapsed) would get 500 there.
	for _, j := range s.config().Jobs {
		if js, ok := s.jobState(j.Name); ok && js.Unavailable {
			problems = append(problems, fmt.Sprintf("job %s has no valid allocation (details in /v1/status)", j.Name))
		}
	}
	if len(problems) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, api.Ready{Ready: false, Problems: problems})
		return
	}
	writeJSON(w, http.StatusOK, api.Ready{Ready: true, ConfigVersion: s.config().Version})
}

func (s *Server) status(w http.ResponseWriter, _ *http.Request, _ config.Token) {
	out := api.Status{Leader: s.client.Leader(), ConfigVersion: s.config().Version, Jobs: s.jobList()}
	if out.Leader {
		d := s.client.Decision()
		out.Decision = &api.Decision{Mode: string(d.Mode), Budget: d.Budget, Binding: d.Binding.String(), BindingSignal: string(d.Binding.Signal),
			BindingLabels: d.Binding.Labels, Reason: d.Reason, DecidedAt: d.At,
			Signals: signalsJSON(s.client.Snapshot(), s.client.Unfresh)}
	}
	writeFiniteJSON(w, http.StatusOK, out)
}

// signalsJSON renders every sample of snap with its age and staleness,
// stale as the controller judges it (unfresh, its rule's max_age): a
// sample it refuses for its age or a clock ahead says why in its error. A
// value that is not a finite number (no sampler gives one: a custom
// signal reading NaN is a failed sample) has no value and says why.
func signalsJSON(snap signals.Snapshot, unfresh func(time.Time, signals.Sample) string) []api.Signal {
	sigs := []api.Signal{}
	for _, x := range snap.Samples {
		why := unfresh(snap.At, x)
		j := api.Signal{Name: string(x.Name), Labels: x.Labels, AgeSeconds: x.Age(snap.At).Seconds(), Stale: why != ""}
		switch v := x.Value; {
		case x.Err != nil:
			j.Error = x.Err.Error()
		case why != "":
			j.Error = why
		case math.IsNaN(v) || math.IsInf(v, 0):
			j.Error = fmt.Sprintf("read %v, not a finite number", v)
		default:
			j.Value = &v
		}
		sigs = append(sigs, j)
	}
	return sigs
}

// writeFiniteJSON answers v as JSON with code. Every float in v is made
// finite first (makeFinite), and the body is encoded in full before
// anything is written: an answer that still cannot be encoded is a 500
// with the API's error body, never a 200 with an empty one.
func writeFiniteJSON(w http.ResponseWriter, code int, v any) {
	body, err := finiteJSON(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "cannot encode the answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// finiteJSON is v encoded as JSON, with a newline (as json.Encoder
// writes it), after makeFinite on a copy of v.
func finiteJSON(v any) ([]byte, error) {
	if v != nil {
		c := reflect.New(reflect.TypeOf(v)).Elem()
		c.Set(reflect.ValueOf(v))
		makeFinite(c)
		v = c.Interface()
	}
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(body, '\n'), nil
}

// finiteFloat is f, or for a float JSON cannot carry, the nearest it
// can: NaN reads 0, an infinity the largest float of its sign.
func finiteFloat(f float64) float64 {
	switch {
	case math.IsNaN(f):
		return 0
	case math.IsInf(f, 1):
		return math.MaxFloat64
	case math.IsInf(f, -1):
		return -math.MaxFloat64
	}
	return f
}

// makeFinite rewrites, in the settable value v, every float JSON cannot
// carry: a pointer to one becomes nil (null, as a failed sample's value
// is), a float finiteFloat's reading. Structs, slices, arrays, maps and
// pointers are walked; slices, maps and pointers are shared with v's
// source, which the handlers build afresh for each answer.
func makeFinite(v reflect.Value) {
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); f != finiteFloat(f) && v.CanSet() {
			v.SetFloat(finiteFloat(f))
		}
	case reflect.Pointer:
		switch {
		case v.IsNil():
		case isFloat(v.Elem().Kind()) && v.Elem().Float() != finiteFloat(v.Elem().Float()):
			if v.CanSet() {
				v.Set(reflect.Zero(v.Type()))
			} else {
				makeFinite(v.Elem())
			}
		default:
			makeFinite(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				makeFinite(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			makeFinite(v.Index(i))
		}
	case reflect.Map:
		if !holdsFloats(v.Type().Elem(), 0) {
			return
		}
		iter := v.MapRange()
		for iter.Next() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(iter.Value())
			makeFinite(e)
			v.SetMapIndex(iter.Key(), e)
		}
	case reflect.Interface:
		if !v.IsNil() && v.CanSet() {
			e := reflect.New(v.Elem().Type()).Elem()
			e.Set(v.Elem())
			makeFinite(e)
			v.Set(e)
		}
	}
}

func isFloat(k reflect.Kind) bool { return k == reflect.Float32 || k == reflect.Float64 }

// holdsFloats reports whether a value of t may hold a float, looking
// depth levels down at most (a type that refers to itself is assumed to).
func holdsFloats(t reflect.Type, depth int) bool {
	if depth > 8 {
		return true
	}
	switch t.Kind() {
	case reflect.Float32, reflect.Float64, reflect.Interface:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return holdsFloats(t.Elem(), depth+1)
	case reflect.Struct:
		for i := range t.NumField() {
			if holdsFloats(t.Field(i).Type, depth+1) {
				return true
			}
		}
	}
	return false
}

// jobJSON is a job's wire status with the typed status it came from.
type jobJSON struct {
	api.Job
	status status.JobStatus
}

func (s *Server) jobState(name string) (jobJSON, bool) {
	s.mu.RLock()
	p, ok := s.pacers[name]
	s.mu.RUnlock()
	if !ok {
		return jobJSON{}, false
	}
	st := p.Status()
	js := jobJSON{Job: api.Job{Job: name, State: string(st.State), Code: string(st.Code), Reason: st.Reason, Rate: st.Rate,
		Binding: st.Binding.String(), BindingSignal: string(st.Binding.Signal), BindingLabels: st.Binding.Labels,
		Holds: []string{}, Unavailable: st.Code == status.CodeUnavailable, LimitedSeconds: map[string]float64{}}, status: st}
	limited := s.client.LimitedSeconds(name)
	for w, secs := range limited {
		js.LimitedSeconds[string(w)] = math.Round(secs*1000) / 1000
	}
	js.WhySlow = status.WhySlow(limited)
	for _, h := range st.Holds {
		js.Holds = append(js.Holds, h.ID)
	}
	return js, true
}

func (s *Server) jobs(w http.ResponseWriter, _ *http.Request, _ config.Token) {
	writeFiniteJSON(w, http.StatusOK, s.jobList())
}

// jobList is every configured job's wire status, in the configuration's
// order.
func (s *Server) jobList() []api.Job {
	list := []api.Job{}
	for _, j := range s.config().Jobs {
		if js, ok := s.jobState(j.Name); ok {
			list = append(list, js.Job)
		}
	}
	return list
}

func (s *Server) job(w http.ResponseWriter, r *http.Request, _ config.Token) {
	js, ok := s.jobState(r.PathValue("job"))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no job %q is configured", r.PathValue("job")))
		return
	}
	writeFiniteJSON(w, http.StatusOK, js.Job)
}

// check answers as freno does, from memory: 200 go, 429 throttled (no
// token now, or a signal warming up at start), 417 held or paused, 404
// unknown job, 500 when the state is stale or the database unreachable.
// A 200 takes a token from the job's limiter (answerCheck). It never
// waits on the database.
func (s *Server) check(w http.ResponseWriter, r *http.Request, _ config.Token) {
	js, a := s.checkJob(r.PathValue("job"))
	if a.code != http.StatusOK {
		w.Header().Set("Retry-After", "1")
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(a.code)
		return
	}
	value, threshold := s.bindingReading(js.status.Binding)
	// Every float finite, so the answer always encodes.
	writeJSON(w, a.code, api.Check{Job: r.PathValue("job"), Message: a.msg, Rate: finiteFloat(js.Rate), Status: a.code,
		StatusCode: a.code, Value: finiteFloat(value), Threshold: finiteFloat(threshold), FrenoMsg: a.msg})
}

// checkAnswer is what /check answers: the status code, the state as one
// of api.OpenCheck's closed words (go, throttled, paused, unavailable,
// unknown) and the message, with the reason.
type checkAnswer struct {
	code       int
	state, msg string
}

// checkJob is job name's status and /check's answer for it: the one
// reading of the job's state both the full check and the open one answer
// from.
func (s *Server) checkJob(name string) (jobJSON, checkAnswer) {
	js, ok := s.jobState(name)
	s.mu.RLock()
	p := s.pacers[name]
	s.mu.RUnlock()
	if !ok || p == nil {
		return js, checkAnswer{code: http.StatusNotFound, state: "unknown", msg: "unknown job"}
	}
	return js, answerCheck(js.status, p)
}

// answerCheck is /check's answer for a job in status st, paced by p. A job
// whose code says it may not go is answered from st: 500 stale or without a
// valid allocation, 429 warming up, 417 held, gated or critical. Any other
// takes a token from the job's limiter, as a batch would: 200 with one,
// 429 without (the rate is spent, or the job has none). A freno client has
// no other way to show demand: the 200 counts as one batch of the job's
// use (of no rows and no time), the 429 as a caller that waited for the
// limiter, so the controller grows the budget of a job paced only by its
// checks as it does a library job's (docs/CONTROLLER.md, use and demand).
func answerCheck(st status.JobStatus, p jobs.Allower) checkAnswer {
	switch {
	case st.Code == status.CodeUnavailable, st.Code == status.CodeStale:
		return checkAnswer{code: http.StatusInternalServerError, state: "unavailable", msg: st.Reason}
	case st.Code == status.CodeWarmingUp:
		// Nothing is wrong and nothing holds it: ask again in a moment.
		return checkAnswer{code: http.StatusTooManyRequests, state: "throttled", msg: st.Reason}
	case !st.Code.Go():
		return checkAnswer{code: http.StatusExpectationFailed, state: "paused", msg: st.Reason}
	}
	if takeToken(p) {
		return checkAnswer{code: http.StatusOK, state: "go", msg: "go"}
	}
	msg := fmt.Sprintf("no token now: the job's rate is %.3g batches/s", finiteFloat(st.Rate))
	if st.Reason != "" {
		msg += "; " + st.Reason
	}
	return checkAnswer{code: http.StatusTooManyRequests, state: "throttled", msg: msg}
}

// tokenTaker is a pacer that takes a token with no in-flight slot, for
// work it never sees end, and counts it as a batch (pacing.LimiterPacer,
// a coordinated worker).
type tokenTaker interface {
	Take() bool
}

// takeToken takes a token of p's job for a check: with no in-flight slot
// where p can (the check never sees the client's chunk end, and a slot
// held by a remote worker's batch is no reason to refuse it), else with a
// slot given back at once.
func takeToken(p jobs.Allower) bool {
	if gp, ok := p.(grantPacer); ok {
		p = gp.JobPacer
	}
	if t, ok := p.(tokenTaker); ok {
		return t.Take()
	}
	done, ok := p.Allow()
	if ok {
		done(0, 0, nil)
	}
	return ok
}

// bindingReading is the binding signal's latest value and its rule's
// target, as freno's Value and Threshold; 0 and 0 when nothing binds or
// the signal has no reading.
func (s *Server) bindingReading(b status.Binding) (value, threshold float64) {
	if b.IsZero() {
		return 0, 0
	}
	for _, x := range s.client.Snapshot().Samples {
		if b.Of(x) && x.Err == nil {
			value = x.Value
			break
		}
	}
	return value, s.config().Rules[b.Signal].Target
}
