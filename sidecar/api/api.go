// Package api holds the wire types of the sidecar's HTTP API: every
// request and answer body, used by the server, the Go remote client and
// the CLI alike. It imports nothing of throttled's, so any client may use
// it. docs/API.md is generated from these types and the route table; a
// test keeps it true.
package api

import (
	"encoding/json"
	"time"
)

// Error is the body of every refusal and failure: what was wrong, and
// where.
type Error struct {
	Error string `json:"error"`
}

// Alive answers GET /healthz: the process serves.
type Alive struct {
	// Status is always "alive".
	Status string `json:"status"`
}

// Ready answers GET /readyz: 200 once the configuration is loaded, holds
// are confirmed, the leader has a fresh sample of the primary and every
// configured job holds a valid allocation; 503 with the problems before.
type Ready struct {
	Ready bool `json:"ready"`
	// Problems say what is not ready yet; absent when ready.
	Problems []string `json:"problems,omitempty"`
	// ConfigVersion is the loaded configuration's digest; absent when not
	// ready.
	ConfigVersion string `json:"config_version,omitempty"`
}

// Status answers GET /v1/status: whether this process leads, each
// configured job as this process paces it and, on the leader, the last
// decision and every signal.
type Status struct {
	Leader        bool   `json:"leader"`
	ConfigVersion string `json:"config_version"`
	// Jobs are the configured jobs, as GET /v1/jobs lists them: with the
	// seconds each spent at each limit in this process.
	Jobs []Job `json:"jobs"`
	// Decision is present on the leader only: its fields then sit beside
	// leader and config_version.
	*Decision
}

// Decision is the leader's last decision, in a Status.
type Decision struct {
	// Mode is running, throttled, paused, critical or stale.
	Mode string `json:"mode"`
	// Budget is the batches per second all jobs together may start.
	Budget float64 `json:"budget"`
	// Binding is the signal that limits the budget, "" when none does,
	// as text for people: its name with its labels, as in
	// replica_lag_seconds{replica="r1"}. A program reads binding_signal
	// and binding_labels instead, and never parses it.
	Binding string `json:"binding"`
	// BindingSignal is the binding signal's name, "" when none binds.
	BindingSignal string `json:"binding_signal"`
	// BindingLabels are the binding sample's labels ({"replica": "r1"}),
	// absent for a signal of the primary as a whole.
	BindingLabels map[string]string `json:"binding_labels,omitempty"`
	// Reason is the decision in words, with its numbers.
	Reason    string    `json:"reason"`
	DecidedAt time.Time `json:"decided_at"`
	Signals   []Signal  `json:"signals"`
}

// Signal is one sample, in a Decision.
type Signal struct {
	Name string `json:"name"`
	// Labels tell a replica's samples apart ({"replica": "r1"}).
	Labels map[string]string `json:"labels,omitempty"`
	// Value is null when the sample failed (see Error).
	Value      *float64 `json:"value"`
	AgeSeconds float64  `json:"age_seconds"`
	// Stale is the controller's own judgment of the sample's age: true
	// when it is older than its rule's max_age (the sampler's 3 s for a
	// signal no rule reads), or stamped further ahead of the clock than
	// that (clock skew); Error then says which. Unsafe, as a failed one
	// is.
	Stale bool   `json:"stale"`
	Error string `json:"error,omitempty"`
}

// Job is one configured job's status: GET /v1/jobs lists them, GET
// /v1/jobs/{job} answers one.
type Job struct {
	Job string `json:"job"`
	// State is running, throttled or paused.
	State string `json:"state"`
	// Code is why, for machines: running, binding, slow_start, inherited,
	// breach_memory, max_rate, low_utilization, not_growing, holding,
	// cut, too_slow, scaled, exempt, held, gated, critical, stale,
	// warming_up or unavailable.
	Code string `json:"code"`
	// Reason is why in words, with its numbers; never parse it.
	Reason string `json:"reason"`
	// Binding is the signal that limits the budget, "" when none does,
	// as text for people (as in a Decision); never parse it.
	Binding string `json:"binding"`
	// BindingSignal is the binding signal's name, "" when none binds.
	BindingSignal string `json:"binding_signal"`
	// BindingLabels are the binding sample's labels ({"replica": "r1"}),
	// absent for a signal of the primary as a whole.
	BindingLabels map[string]string `json:"binding_labels,omitempty"`
	// Rate is the job's allocated rate, batches per second.
	Rate float64 `json:"rate"`
	// Holds are the IDs of the holds that apply to the job.
	Holds []string `json:"holds"`
	// Unavailable is true when the job is paused for want of a valid
	// allocation (lease lapsed, database unreachable, holds unconfirmed):
	// code unavailable.
	Unavailable bool `json:"unavailable"`
	// LimitedSeconds are the seconds the job spent at each limit in this
	// process since it started pacing it, by why: full_rate, growth, a
	// rule's signal (foreground_latency, primary_load, ...),
	// batch_errors, slow_start, breach_memory, low_utilization,
	// not_growing, warming_up, unavailable, exempt, gated, critical,
	// stale, hold:<source> (manual, auto, grafana-alert, cli, window) or
	// other; as throttled_jobs_limited_seconds_total counts them.
	LimitedSeconds map[string]float64 `json:"limited_seconds"`
	// WhySlow sums them up in a line: "ran 4m10s: 81 % limited by
	// foreground_latency, 12 % at full rate, 7 % slow start".
	WhySlow string `json:"why_slow"`
}

// Check answers GET /check/{job} as freno does: the status code says go
// (200: a token of the job's rate is taken, one batch), throttled (429:
// none now), paused (417), unknown job (404) or unsafe (500); the keys
// are in the order freno clients read.
type Check struct {
	Job     string  `json:"job"`
	Message string  `json:"message"`
	Rate    float64 `json:"rate"`
	Status  int     `json:"status"`
	// freno's own keys, for its clients: the status code again, the
	// binding signal's reading and its target (0 and 0 when nothing
	// binds), and the message.
	StatusCode int     `json:"StatusCode"`
	Value      float64 `json:"Value"`
	Threshold  float64 `json:"Threshold"`
	FrenoMsg   string  `json:"Message"`
}

// OpenCheck answers GET /check/{job} to a caller without a token (under
// open_checks or open_reads), as freno's open check does: the status code
// and Retry-After say go or wait, and the body says only which, in closed
// words. The reason, the holds, who made them, signal readings, paths,
// addresses and errors are for a caller with a read token (Check).
type OpenCheck struct {
	Job string `json:"job"`
	// State is go, throttled, paused, unavailable, or unknown for a job
	// not configured.
	State string `json:"state"`
	// Code is the job's status code (as Job's code: held, gated,
	// critical, stale, cut, warming_up, ...), or unknown_job.
	Code string `json:"code"`
	// freno's keys, for its clients: the status code again, and the
	// state as the message.
	StatusCode int    `json:"StatusCode"`
	Message    string `json:"Message"`
}

// Hold is one active hold: GET /v1/holds lists them; POST /v1/holds and
// DELETE /v1/holds/{id} answer the hold made or released.
type Hold struct {
	ID string `json:"id"`
	// Scope is "all", "job:NAME" or "group:PREFIX".
	Scope string `json:"scope"`
	// Source is manual, auto, grafana-alert or cli.
	Source  string    `json:"source"`
	Reason  string    `json:"reason"`
	Actor   string    `json:"actor"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
	// Ratio is a live override's share of the rate; 0 (left out) for a
	// pause.
	Ratio float64 `json:"ratio,omitempty"`
	// Exempt is the signal an exemption's jobs ignore; "" (left out) for
	// a pause or an override.
	Exempt string `json:"exempt,omitempty"`
	// Warnings, only in the answer to POST /v1/holds, say what is placed
	// but may not be what was meant: a hold on a job (or a group) no
	// process has registered.
	Warnings []string `json:"warnings,omitempty"`
}

// AuditEntry is one entry of the audit log: GET /v1/audit?since=1h lists
// them, oldest first.
type AuditEntry struct {
	ID    int64     `json:"id"`
	At    time.Time `json:"at"`
	Event string    `json:"event"`
	Actor string    `json:"actor"`
	// Source is who or what acted: manual, auto, grafana-alert, cli.
	Source string `json:"source"`
	Reason string `json:"reason"`
	HoldID string `json:"hold_id,omitempty"`
	// Detail is the event's own record (a reload's versions, a cap's
	// old and new value), an object.
	Detail json.RawMessage `json:"detail,omitempty"`
}

// PauseRequest is the body of POST /v1/holds.
type PauseRequest struct {
	// Scope is "all", "job:NAME" or "group:PREFIX".
	Scope string `json:"scope"`
	// TTL is a duration such as "30m"; empty means the default.
	TTL string `json:"ttl"`
	// Reason is required, and audited.
	Reason string `json:"reason"`
	// Ratio, from 0 to 1, makes the hold a live override: the jobs run at
	// that share of their rate instead of pausing. Leave it out (or 0) to
	// pause.
	Ratio float64 `json:"ratio,omitempty"`
	// Exempt names a signal (a rule's name, such as replica_lag_seconds):
	// the jobs ignore it until the hold expires instead of pausing. A job
	// rule on it no longer gates them, and a critical or stale pause only
	// it causes lets them go on at the rate they had, with a page. Not
	// with ratio.
	Exempt string `json:"exempt,omitempty"`
}

// ResumeRequest is the body of POST /v1/resume, which ends a latched
// critical pause.
type ResumeRequest struct {
	Reason string `json:"reason"`
}

// ResumeAnswer answers POST /v1/resume: the request is taken; the leader
// acts on its next decision.
type ResumeAnswer struct {
	// Resume is always "requested".
	Resume string `json:"resume"`
	Note   string `json:"note"`
}

// ReloadAnswer answers POST /v1/reload: 200 applied, 409 refused with the
// reason and the version kept.
type ReloadAnswer struct {
	Applied bool `json:"applied"`
	// Error is why a reload was refused; absent when applied.
	Error string `json:"error,omitempty"`
	// ConfigVersion is the version now in force.
	ConfigVersion string `json:"config_version"`
	// By is the token that reloaded; absent when refused.
	By string `json:"by,omitempty"`
}

// AcquireRequest is the body of POST /v1/jobs/{job}/acquire.
type AcquireRequest struct {
	// N is how many tokens to take, 1 to 100. Defaults to 1.
	N int `json:"n"`
	// MaxWait bounds the wait for them, such as "2s"; at most 10s.
	// Defaults to 1s.
	MaxWait string `json:"max_wait"`
	// Worker names the worker (a host or a pod) in the job's reason
	// while its tokens are unreported; defaults to the token's name. At
	// most 64 printable characters.
	Worker string `json:"worker,omitempty"`
}

// AcquireResponse lists the tokens granted; report each one.
type AcquireResponse struct {
	Tokens []string `json:"tokens"`
	// Rate is the job's allocated rate, batches per second.
	Rate float64 `json:"rate"`
	// Batch carries the job's configured batch bounds, when any is set:
	// a remote worker sizes its batches within them.
	Batch *BatchBounds `json:"batch,omitempty"`
	// TokenTTLSeconds is how long each token holds its in-flight slot
	// unreported: at it, the token expires, counts as a failed batch, and
	// its report is refused with 410.
	TokenTTLSeconds float64 `json:"token_ttl_seconds"`
}

// BatchBounds are a job's configured batch bounds; 0 (omitted) leaves
// the worker's own value.
type BatchBounds struct {
	MinSize          int     `json:"min_size,omitempty"`
	MaxSize          int     `json:"max_size,omitempty"`
	TargetDurationMs float64 `json:"target_duration_ms,omitempty"`
}

// Throttled answers an acquire that got no token within max_wait (429,
// with Retry-After).
type Throttled struct {
	Error string `json:"error"`
	// Reason is why the job is held back, in words: the job's own
	// reason, and the tokens its workers hold unreported, by worker.
	Reason string  `json:"reason"`
	Rate   float64 `json:"rate"`
}

// ReportRequest is the body of POST /v1/jobs/{job}/report: one batch's
// outcome for its token.
type ReportRequest struct {
	Token string `json:"token"`
	// Rows are the rows the batch did: at most what it could hold, its
	// batch_size when given, else the job's max_batch_size when the token
	// was granted, else a billion.
	Rows       int64   `json:"rows"`
	DurationMs float64 `json:"duration_ms"`
	// Error is the batch's error, empty on success.
	Error string `json:"error"`
	// BatchSize and Retry are optional: the batch's size, and whether it
	// was a retry, for the metrics.
	BatchSize int  `json:"batch_size,omitempty"`
	Retry     bool `json:"retry,omitempty"`
	// Remaining is optional: the rows the job still has to do after this
	// batch, for the ETA on the jobs dashboard.
	Remaining *int64 `json:"remaining,omitempty"`
}

// ReportAnswer answers a report.
type ReportAnswer struct {
	// Reported is always true.
	Reported bool `json:"reported"`
}

// HookResult answers POST /v1/hooks/grafana: what the notification's
// alerts did. Each alert is keyed by its fingerprint, so a repeated
// delivery renews rather than adds.
type HookResult struct {
	// Added are firing alerts that made a hold.
	Added int `json:"added"`
	// Renewed are firing alerts whose hold was extended.
	Renewed int `json:"renewed"`
	// Ignored are alerts that changed nothing: a firing delivered after
	// its own resolve, or a resolve with no hold.
	Ignored int `json:"ignored"`
	// Released are resolved alerts whose hold ended.
	Released int `json:"released"`
}
