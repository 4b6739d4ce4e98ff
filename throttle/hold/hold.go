package hold

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/throttled/throttled/internal/jobname"
	"github.com/throttled/throttled/internal/textsafe"
)

// ScopeKind says which jobs a hold stops.
type ScopeKind string

// The scope kinds.
const (
	// ScopeAllJobs stops every job.
	ScopeAllJobs ScopeKind = "all"
	// ScopeOneJob stops the job named by Scope.Value.
	ScopeOneJob ScopeKind = "job"
	// ScopeGroup stops every job whose name starts with Scope.Value.
	ScopeGroup ScopeKind = "group"
)

// Scope is the set of jobs a hold stops. Build one with [AllJobs],
// [OneJob] or [Group]; check user input with [Scope.Validate].
type Scope struct {
	Kind ScopeKind
	// Value is the job name for ScopeOneJob, the name prefix for
	// ScopeGroup, and empty for ScopeAllJobs.
	Value string
}

// AllJobs returns the scope of every job.
func AllJobs() Scope { return Scope{Kind: ScopeAllJobs} }

// OneJob returns the scope of the named job alone.
func OneJob(job string) Scope { return Scope{Kind: ScopeOneJob, Value: job} }

// Group returns the scope of every job whose name starts with prefix, e.g.
// "purge_".
func Group(prefix string) Scope { return Scope{Kind: ScopeGroup, Value: prefix} }

// Matches reports whether s covers the named job. It is meaningful only
// for a valid scope: an unknown kind matches nothing (and [Local] never
// stores one).
func (s Scope) Matches(job string) bool {
	switch s.Kind {
	case ScopeAllJobs:
		return true
	case ScopeOneJob:
		return job == s.Value
	case ScopeGroup:
		return strings.HasPrefix(job, s.Value)
	}
	return false
}

// Validate reports whether s is a usable scope: a known kind, no value for
// ScopeAllJobs, a valid job name for ScopeOneJob, and a non-empty prefix
// of one for ScopeGroup. The error wraps [ErrInvalidScope] and names the
// scope.
func (s Scope) Validate() error {
	if p := s.problem(); p != "" {
		return fmt.Errorf("%w %q: %s", ErrInvalidScope, s.String(), p)
	}
	return nil
}

func (s Scope) problem() string {
	switch s.Kind {
	case ScopeAllJobs:
		if s.Value != "" {
			return "scope all takes no value"
		}
	case ScopeOneJob:
		if p := jobname.Problem(s.Value); p != "" {
			return "job name " + p
		}
	case ScopeGroup:
		if p := jobname.Problem(s.Value); p != "" {
			return "group prefix " + p
		}
	default:
		return fmt.Sprintf("kind %q is not one of all, job, group", string(s.Kind))
	}
	return ""
}

// String returns "all", "job:<name>" or "group:<prefix>".
func (s Scope) String() string {
	if s.Kind == ScopeAllJobs && s.Value == "" {
		return string(s.Kind)
	}
	return string(s.Kind) + ":" + s.Value
}

// ParseScope reads a scope as [Scope.String] writes it: "all", "job:NAME"
// or "group:PREFIX". It refuses anything else, and a scope that does not
// validate, with an error that quotes it.
func ParseScope(s string) (Scope, error) {
	kind, value, hasValue := strings.Cut(s, ":")
	var sc Scope
	switch kind {
	case "all":
		if hasValue {
			return sc, fmt.Errorf("scope %q: all takes no name", s)
		}
		sc = AllJobs()
	case "job":
		sc = OneJob(value)
	case "group":
		sc = Group(value)
	default:
		return sc, fmt.Errorf("scope %q: want all, job:NAME or group:PREFIX", s)
	}
	return sc, sc.Validate()
}

// Source says who or what placed a hold. Automation must release only the
// holds it placed, by ID, never a person's; [Local.Release] removes exactly
// one hold, so clearing one never clears another.
type Source string

// The hold sources.
const (
	// SourceManual is a person, through the dashboard or the HTTP API.
	SourceManual Source = "manual"
	// SourceAuto is throttled's controller (an auto-pause).
	SourceAuto Source = "auto"
	// SourceGrafanaAlert is a Grafana alert's webhook.
	SourceGrafanaAlert Source = "grafana-alert"
	// SourceCLI is a person running the throttled CLI.
	SourceCLI Source = "cli"
)

// requestSources are the sources a [Request] may give.
var requestSources = []Source{SourceManual, SourceAuto, SourceGrafanaAlert, SourceCLI}

// Sources lists every source a hold may have: those a request may give,
// then SourceWindow, which only [Windows] gives.
func Sources() []Source { return append(slices.Clone(requestSources), SourceWindow) }

func (s Source) known() bool { return slices.Contains(requestSources, s) }

// Hold is one pause: while it is active (before Expires), no job in its
// Scope may start work.
type Hold struct {
	// ID identifies the hold for Release: "h1", "h2", … in order of
	// creation, unique within one [Local].
	ID      string
	Scope   Scope
	Source  Source
	Reason  string // why, as given by the actor; never empty
	Actor   string // who: a user, a token's name or a component; may be empty
	Created time.Time
	// Expires is when the hold stops applying. Every hold expires.
	Expires time.Time
	// Ratio, when above 0, makes the hold a live override instead of a
	// pause: the jobs in its scope run at Ratio (at most 1) of the rate
	// they would get. 0, the zero value, pauses them.
	Ratio float64
	// Exempt, when set, makes the hold an exemption instead of a pause:
	// the jobs in its scope ignore the named signal (a rule's name, such
	// as replica_lag or vacuum_running) until the hold expires. A job rule
	// on it no longer gates them, and a critical or stale pause that only
	// it causes lets them go on at the rate they had (it pages: they run
	// while the cluster is critical). Every other signal still binds.
	Exempt string
}

// active reports whether h applies at now.
func (h Hold) active(now time.Time) bool { return now.Before(h.Expires) }

// Pauses reports whether h stops its jobs (a ratio of 0) rather than
// scaling them.
func (h Hold) Pauses() bool { return h.Ratio <= 0 && h.Exempt == "" }

// Exempts reports whether hs exempt a job from signal name.
func Exempts(hs []Hold, name string) bool {
	for _, h := range hs {
		if h.Exempt != "" && h.Exempt == name {
			return true
		}
	}
	return false
}

// ExemptReason is the reason of a job that an exemption lets run through
// a pause, after the reason of the pause.
func ExemptReason(h Hold, pause string) string {
	return fmt.Sprintf("exempt from %s by hold %s on %s by %s (%s): %s, until %s; runs through: %s", h.Exempt, h.ID, h.Scope, h.Actor, h.Source, h.Reason,
		h.Expires.UTC().Format(time.RFC3339), pause)
}

// Pausing returns the holds of hs that stop their jobs: while it is empty
// a job may start work, at the scale Scale gives.
func Pausing(hs []Hold) []Hold {
	var out []Hold
	for _, h := range hs {
		if h.Pauses() {
			out = append(out, h)
		}
	}
	return out
}

// Scale is the share of its rate a job runs at under hs's ratio holds:
// the smallest ratio, 1 with none, and the hold that sets it.
func Scale(hs []Hold) (float64, *Hold) {
	scale, by := 1.0, (*Hold)(nil)
	for i, h := range hs {
		if h.Exempt == "" && !h.Pauses() && h.Ratio < scale {
			scale, by = h.Ratio, &hs[i]
		}
	}
	return scale, by
}

// ScaledReason is the reason of a job that a ratio hold scales, after the
// reason it would have had.
func ScaledReason(h Hold, before string) string {
	return fmt.Sprintf("scaled to %.0f%% by hold %s on %s by %s (%s): %s, until %s; %s", 100*h.Ratio, h.ID, h.Scope, h.Actor, h.Source, h.Reason,
		h.Expires.UTC().Format(time.RFC3339), before)
}

// Request asks [Local.Add] for a hold.
type Request struct {
	Scope  Scope
	Source Source
	Reason string // required
	Actor  string
	// TTL is how long the hold lasts. 0 means the TTLPolicy's default; it
	// may not be negative or exceed the policy's Max.
	TTL time.Duration
	// Ratio, from 0 to 1, scales the jobs instead of pausing them (see
	// Hold.Ratio); 0 pauses.
	Ratio float64
	// Exempt names a signal the jobs ignore instead (see Hold.Exempt).
	Exempt string
}

// The bounds of a hold that [Request.Check] enforces.
const (
	// MinRatio is the smallest ratio a live override may give: at a
	// thousandth of its rate a job still starts batches (one an hour at
	// 0.28 batches/s); a ratio far smaller, such as 1e-320, is not an
	// override that runs the jobs but a pause that says it runs them, so
	// it is refused, and a pause is asked for as one (ratio 0).
	MinRatio = 0.001
	// MinTTL is the shortest life of a hold. The database keeps
	// times to the microsecond and refuses a hold that expires as it is
	// made; a hold is placed and read by people, so anything under a
	// second is refused with the rest of the request's problems.
	MinTTL = time.Second
)

// Check validates r as every hold is validated, in this process's set and
// in the cluster's store alike: a valid scope, a known source, a reason,
// one-line text PostgreSQL can store (see [Storable]), a ratio of
// 0 or from MinRatio to 1, and a TTL that ttls accepts (see
// [TTLPolicy.TTL]). It returns the TTL the hold gets (0 when neither the
// request nor ttls gives one: the cluster's default), or an error
// wrapping [ErrInvalid] that lists every problem, each naming its
// field and value.
func (r Request) Check(ttls TTLPolicy) (time.Duration, error) {
	var errs []string
	if p := r.Scope.problem(); p != "" {
		errs = append(errs, fmt.Sprintf("scope %q: %s", r.Scope.String(), p))
	}
	if !r.Source.known() {
		errs = append(errs, fmt.Sprintf("source %q is not one of %s", string(r.Source), joinSources(requestSources)))
	}
	if strings.TrimSpace(r.Reason) == "" {
		errs = append(errs, "a reason is required")
	}
	switch {
	case !(r.Ratio >= 0 && r.Ratio <= 1):
		errs = append(errs, fmt.Sprintf("ratio %v: want a share from 0 (pause) to 1 of the job's rate", r.Ratio))
	case r.Ratio > 0 && r.Ratio < MinRatio:
		errs = append(errs, fmt.Sprintf("ratio %v is below the smallest accepted, %v (a thousandth of the job's rate): a smaller one would never start a batch; to stop the jobs, place a pause (throttled pause, or ratio 0)",
			r.Ratio, MinRatio))
	}
	if r.Exempt != "" {
		if r.Ratio != 0 {
			errs = append(errs, fmt.Sprintf("exempt %q with ratio %v: a hold exempts from a signal or scales, not both", r.Exempt, r.Ratio))
		}
		if !signalName(r.Exempt) {
			errs = append(errs, fmt.Sprintf("exempt %q: want a signal's name, such as replica_lag (lower case, digits and _)", r.Exempt))
		}
	}
	for _, f := range []struct{ name, v string }{{"reason", r.Reason}, {"actor", r.Actor}, {"scope", r.Scope.Value}} {
		if err := Storable(f.v); err != nil {
			errs = append(errs, f.name+": "+err.Error())
		}
	}
	ttl, err := ttls.TTL(r.TTL)
	if err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return 0, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(errs, "; "))
	}
	return ttl, nil
}

// signalName reports whether s can be a signal's name: lower-case
// letters, digits and _, starting with a letter, at most 63 bytes.
func signalName(s string) bool {
	if s == "" || len(s) > 63 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Storable refuses text that may not be a hold's reason or actor (or any
// other one-line text from outside that is stored and shown to people):
// invalid UTF-8 or a NUL, which PostgreSQL cannot store in a text column
// (JSON carries a NUL as \u0000 and Go decodes it into a string), and
// every character that could forge a line or rewrite a terminal in the
// CLI's tables and the audit log: a control character (\n, \r, \t, ESC,
// DEL, C1 such as U+009B), a line or paragraph separator, or a
// bidirectional override or isolate (see [textsafe.Refused]). The error
// names the first offending character's code point and byte offset; the
// caller names the field. An on-call engineer reading `throttled holds`
// during an incident must be able to trust every line.
func Storable(s string) error {
	switch {
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case strings.ContainsRune(s, 0):
		return errors.New("contains a NUL character")
	}
	if p := textsafe.Problem(s); p != "" {
		return errors.New(p + "; reasons and actors are one printable line")
	}
	return nil
}

// Defaults of [LocalConfig].
const (
	DefaultTTL    = time.Hour
	DefaultMaxTTL = 24 * time.Hour
)

// LocalConfig configures [NewLocal]. The zero value means defaults.
type LocalConfig struct {
	// TTL is how long a hold lives: by default DefaultTTL (1h), or
	// its Max if shorter, capped at DefaultMaxTTL (24h).
	TTL TTLPolicy

	now func() time.Time // tests set a fake clock; nil means time.Now
}

func (c *LocalConfig) fill() {
	c.TTL = c.TTL.Filled()
	if c.now == nil {
		c.now = time.Now
	}
}

// Local is the set of active pause holds of one process, in memory
// (the cluster's durable holds live in the holds package's Store). Work
// may start only while no hold applies to its job. Every hold expires;
// expired holds are forgotten the next time the set is used at or after
// their expiry, so times given to it should not go backwards.
//
// The controller reads the holds at every tick, so an expiry takes effect
// within one.
//
// Create one with [NewLocal]. It is safe for concurrent use.
type Local struct {
	cfg LocalConfig

	mu    sync.Mutex
	holds []Hold // active or not yet pruned, oldest first
	seq   uint64
}

// NewLocal fills cfg's defaults, validates it and returns an empty set.
// Errors name the field (hold.LocalConfig.TTL) and its value.
func NewLocal(cfg LocalConfig) (*Local, error) {
	if err := cfg.TTL.Check(); err != nil {
		return nil, fmt.Errorf("hold: LocalConfig.TTL: %w", err)
	}
	cfg.fill()
	return &Local{cfg: cfg}, nil
}

// Add is shorthand for AddAt(now(), req).
func (h *Local) Add(req Request) (Hold, error) { return h.AddAt(h.cfg.now(), req) }

// AddAt places a hold created at now and expiring TTL later (the
// policy's default if req.TTL is 0). It refuses, with an error wrapping [ErrInvalid] that
// names the field and value, an invalid scope, an unknown source, an
// empty reason, and a TTL that is negative or over MaxTTL. Holds on the
// same scope coexist: each is released on its own.
func (h *Local) AddAt(now time.Time, req Request) (Hold, error) {
	ttl, err := req.Check(h.cfg.TTL)
	if err != nil {
		return Hold{}, err
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	h.pruneLocked(now)
	h.seq++
	hold := Hold{
		ID:      "h" + strconv.FormatUint(h.seq, 10),
		Scope:   req.Scope,
		Source:  req.Source,
		Reason:  req.Reason,
		Actor:   req.Actor,
		Created: now,
		Expires: now.Add(ttl),
		Ratio:   req.Ratio,
		Exempt:  req.Exempt,
	}
	// Keep oldest first even if callers pass instants out of order; ties
	// keep insertion order.
	i := len(h.holds)
	for i > 0 && h.holds[i-1].Created.After(now) {
		i--
	}
	h.holds = slices.Insert(h.holds, i, hold)
	return hold, nil
}

// Release is shorthand for ReleaseAt(now(), id).
func (h *Local) Release(id string) (Hold, error) { return h.ReleaseAt(h.cfg.now(), id) }

// ReleaseAt removes the hold with the given id, active at now, and returns
// it. Only that hold goes: other holds on the same scope, a person's or
// automation's, stay. An id that names no active hold gives an error
// wrapping [ErrUnknown] and naming the id.
func (h *Local) ReleaseAt(now time.Time, id string) (Hold, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pruneLocked(now)
	i := slices.IndexFunc(h.holds, func(x Hold) bool { return x.ID == id })
	if i < 0 {
		return Hold{}, fmt.Errorf("%w %q: never added, already released, or expired", ErrUnknown, id)
	}
	hold := h.holds[i]
	h.holds = slices.Delete(h.holds, i, i+1)
	return hold, nil
}

// Applying returns the holds active at now whose scope matches the named
// job, oldest first; work on the job may start only if it is empty.
func (h *Local) Applying(now time.Time, job string) []Hold {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pruneLocked(now)
	var out []Hold
	for _, x := range h.holds {
		if x.Scope.Matches(job) {
			out = append(out, x)
		}
	}
	return out
}

// Active returns every hold active at now, oldest first.
func (h *Local) Active(now time.Time) []Hold {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pruneLocked(now)
	return slices.Clone(h.holds)
}

// pruneLocked forgets the holds expired at now. h.mu must be held.
func (h *Local) pruneLocked(now time.Time) {
	h.holds = slices.DeleteFunc(h.holds, func(x Hold) bool { return !x.active(now) })
}

// joinSources is ss as a list for people: "manual, auto, …".
func joinSources(ss []Source) string {
	words := make([]string, len(ss))
	for i, s := range ss {
		words[i] = string(s)
	}
	return strings.Join(words, ", ")
}
