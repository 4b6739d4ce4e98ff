// Package config reads the sidecar's HCL configuration: the primary and
// its replicas, cores, signal rules, jobs, hold lifetimes, the HTTP
// listener, API tokens and notifiers.
//
// Secrets are never required inline: every secret may come from the
// environment (env("NAME")) or a file (a *_file attribute). Errors name
// the file, the line and the field; HCL itself suggests the right name
// for a misspelled one. [Load] parses and validates offline; [Config.Live]
// then checks the configuration against the running cluster: every
// configured replica must exist. A configuration that fails either is
// refused as a whole.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/throttled/throttled/internal/jobname"
	"github.com/throttled/throttled/internal/textsafe"
	"github.com/throttled/throttled/page"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
)

// file is the HCL document.
type file struct {
	Cluster   *string          `hcl:"cluster,optional"`
	Dashboard *string          `hcl:"dashboard_url,optional"`
	Runbook   *string          `hcl:"runbook_url,optional"`
	Primary   *primaryBlock    `hcl:"primary,block"`
	Replicas  []replicaBlock   `hcl:"replica,block"`
	Signals   []signalBlock    `hcl:"signal,block"`
	Customs   []customBlock    `hcl:"custom_signal,block"`
	Maint     []maintBlock     `hcl:"maintenance,block"`
	Bouncer   *bouncerBlock    `hcl:"pgbouncer,block"`
	Jobs      []jobBlock       `hcl:"job,block"`
	Holds     *holdsBlock      `hcl:"holds,block"`
	Listen    *listenBlock     `hcl:"listen,block"`
	Tokens    []tokenBlock     `hcl:"token,block"`
	Notifiers []notifierBlock  `hcl:"notifier,block"`
	Control   *controllerBlock `hcl:"controller,block"`
	Grafana   *grafanaBlock    `hcl:"grafana,block"`

	// attrs are the top-level attributes, for their places in errors.
	attrs hclsyntax.Attributes
}

type grafanaBlock struct {
	WebhookSecret     *string   `hcl:"webhook_secret,optional"`
	WebhookSecretFile *string   `hcl:"webhook_secret_file,optional"`
	SignatureHeader   *string   `hcl:"signature_header,optional"`
	TimestampHeader   *string   `hcl:"timestamp_header,optional"`
	ReplayWindow      *string   `hcl:"replay_window,optional"`
	HoldTTL           *string   `hcl:"hold_ttl,optional"`
	UserHeader        *string   `hcl:"user_header,optional"`
	ReturnURLs        []string  `hcl:"return_urls,optional"`
	URL               *string   `hcl:"url,optional"`
	SAToken           *string   `hcl:"service_account_token,optional"`
	SATokenFile       *string   `hcl:"service_account_token_file,optional"`
	AllowUnstamped    *bool     `hcl:"allow_unstamped_signatures,optional"`
	Range             hcl.Range `hcl:",def_range"`
}

type primaryBlock struct {
	DSN             *string   `hcl:"dsn,optional"`
	DSNFile         *string   `hcl:"dsn_file,optional"`
	CoordinationDSN *string   `hcl:"coordination_dsn,optional"`
	Cores           float64   `hcl:"cores"`
	Range           hcl.Range `hcl:",def_range"`
}

type replicaBlock struct {
	Name   string    `hcl:"name,label"`
	Policy *string   `hcl:"policy,optional"`
	DSN    *string   `hcl:"dsn,optional"`
	Range  hcl.Range `hcl:",def_range"`
}

type signalBlock struct {
	Name     string    `hcl:"name,label"`
	Target   float64   `hcl:"target"`
	Critical *float64  `hcl:"critical,optional"`
	MaxAge   *string   `hcl:"max_age,optional"`
	Required *bool     `hcl:"required,optional"`
	Range    hcl.Range `hcl:",def_range"`
}

// customBlock is a custom signal: a scalar query (see signals.CustomSignal).
type customBlock struct {
	Name    string    `hcl:"name,label"`
	Query   string    `hcl:"query"`
	Unit    *string   `hcl:"unit,optional"`
	Timeout *string   `hcl:"timeout,optional"`
	Every   *string   `hcl:"every,optional"`
	Range   hcl.Range `hcl:",def_range"`
}

// bouncerBlock is the PgBouncer in front of the primary: its admin
// console, for the pool signals.
type bouncerBlock struct {
	DSN     *string   `hcl:"dsn,optional"`
	DSNFile *string   `hcl:"dsn_file,optional"`
	Range   hcl.Range `hcl:",def_range"`
}

// maintBlock is a named maintenance window that jobs may avoid.
type maintBlock struct {
	Name   string    `hcl:"name,label"`
	Window string    `hcl:"window"`
	Range  hcl.Range `hcl:",def_range"`
}

type jobBlock struct {
	Name                string    `hcl:"name,label"`
	RunWindows          []string  `hcl:"run_windows,optional"`
	Avoid               []string  `hcl:"avoid,optional"`
	Tables              []string  `hcl:"tables,optional"`
	Signals             []string  `hcl:"signals,optional"`
	Weight              *float64  `hcl:"weight,optional"`
	MinRate             *float64  `hcl:"min_rate,optional"`
	MaxRate             *float64  `hcl:"max_rate,optional"`
	MinBatchSize        *int      `hcl:"min_batch_size,optional"`
	MaxBatchSize        *int      `hcl:"max_batch_size,optional"`
	TargetBatchDuration *string   `hcl:"target_batch_duration,optional"`
	Range               hcl.Range `hcl:",def_range"`
}

type holdsBlock struct {
	DefaultTTL *string   `hcl:"default_ttl,optional"`
	MaxTTL     *string   `hcl:"max_ttl,optional"`
	Range      hcl.Range `hcl:",def_range"`
}

type listenBlock struct {
	Address    string    `hcl:"address"`
	TLSCert    *string   `hcl:"tls_cert,optional"`
	TLSKey     *string   `hcl:"tls_key,optional"`
	OpenReads  *bool     `hcl:"open_reads,optional"`
	OpenChecks *bool     `hcl:"open_checks,optional"`
	MaxRequest *int      `hcl:"max_concurrent_requests,optional"`
	Range      hcl.Range `hcl:",def_range"`
}

type tokenBlock struct {
	Name       string    `hcl:"name,label"`
	Secret     *string   `hcl:"secret,optional"`
	SecretFile *string   `hcl:"secret_file,optional"`
	Scopes     []string  `hcl:"scopes"`
	Range      hcl.Range `hcl:",def_range"`
}

type notifierBlock struct {
	Kind       string    `hcl:"kind,label"`
	URL        string    `hcl:"url"`
	Secret     *string   `hcl:"secret,optional"`
	SecretFile *string   `hcl:"secret_file,optional"`
	Range      hcl.Range `hcl:",def_range"`
}

type controllerBlock struct {
	MaxBudget         *float64  `hcl:"max_budget,optional"`
	QuietPeriod       *string   `hcl:"quiet_period,optional"`
	ForegroundLatency *bool     `hcl:"foreground_latency,optional"`
	Range             hcl.Range `hcl:",def_range"`
}

// Scope is what a token may do.
type Scope string

// Token scopes: read everything; pause and resume; admin (reload); work
// (take and report tokens, for remote workers).
const (
	ScopeRead  Scope = "read"
	ScopePause Scope = "pause"
	ScopeAdmin Scope = "admin"
	ScopeWork  Scope = "work"
)

// Token is an API token. Secret is never logged.
type Token struct {
	Name   string
	Secret string
	Scopes []Scope
}

// Allows reports whether the token has scope s.
func (t Token) Allows(s Scope) bool { return slices.Contains(t.Scopes, s) }

// Notifier is a paging destination.
type Notifier struct {
	Kind   string // webhook, alertmanager or pagerduty
	URL    string
	Secret string
}

// Job is a job's configuration.
type Job struct {
	Name                     string
	Weight, MinRate, MaxRate float64
	// MinBatchSize, MaxBatchSize and TargetBatchDuration, when set (not
	// 0), bound the batch size of the job's remote workers: the sidecar
	// sends them with every token, and they replace the worker's own.
	MinBatchSize, MaxBatchSize int
	TargetBatchDuration        time.Duration
	// Tables are the tables the job writes (schema.table); Signals the job
	// rules that bind it, nil for every one.
	Tables, Signals []string
}

// Config is a loaded, validated configuration.
type Config struct {
	// Path is the file it came from; Version a digest of its text.
	Path, Version string

	// Fields tagged restart take effect only when throttled restarts; a
	// reload that changes one is refused, naming it (see [RestartOnly]).
	// Every other field a reload applies.
	PrimaryDSN      string `restart:"primary dsn"`
	CoordinationDSN string `restart:"coordination_dsn"`
	// PgBouncerDSN is the admin console of the PgBouncer in front of the
	// primary (dbname=pgbouncer), for its pool signals; "" for none.
	PgBouncerDSN string  `restart:"pgbouncer dsn"`
	Cores        float64 `restart:"cores"`
	// Replicas maps each configured replica to its policy.
	Replicas map[string]throttle.ReplicaPolicy
	// ReplicaDSNs are replicas to sample directly, by name.
	ReplicaDSNs map[string]string `restart:"replica dsns"`
	Rules       map[signals.Name]throttle.Rule
	// JobRules are the rules that bind jobs one by one (gates): on
	// vacuum_running, antiwraparound_vacuums and the custom signals.
	JobRules map[signals.Name]throttle.Rule
	// Windows are the jobs' run windows and the maintenance windows they
	// avoid; `throttled run` writes them to the cluster.
	Windows throttle.Windows
	// Custom are the custom signals, each with its file:line as Source.
	Custom CustomSignals `restart:"custom_signal"`
	Jobs   []Job
	// HoldTTL is the holds block's default_ttl and max_ttl, filled:
	// `throttled run` writes it as the cluster's hold policy.
	HoldTTL throttle.TTLPolicy `restart:"holds default_ttl/max_ttl"`
	Listen  string             `restart:"listen address"`
	TLSCert string             `restart:"tls_cert/tls_key"`
	TLSKey  string             `restart:"tls_cert/tls_key"`
	// OpenReads leaves the read endpoints open without a token.
	OpenReads bool
	// OpenChecks leaves the freno check (/check/...) open without a
	// token, and nothing else: for gh-ost's --throttle-http and freno
	// clients, which send none.
	OpenChecks bool
	// MaxConcurrent is how many requests the API serves at once before
	// shedding with 503.
	MaxConcurrent int `restart:"max_concurrent_requests"`
	Tokens        []Token
	Notifiers     []Notifier
	MaxBudget     float64
	QuietPeriod   time.Duration
	// NoForegroundLatency turns off the foreground-latency canary that
	// throttled runs by default where it can (controller block,
	// foreground_latency = false).
	NoForegroundLatency bool `restart:"controller.foreground_latency"`
	// Cluster names the database cluster in pages. Defaults to
	// "postgres".
	Cluster string `restart:"cluster"`
	// Dashboard is the URL every page links to.
	Dashboard string
	// Runbook is the runbook every page links its section of; "" for the
	// one shipped with throttled (page.DefaultRunbook).
	Runbook string
	// Grafana configures the Alerting webhook contact point.
	Grafana Grafana

	// places are where the blocks [Config.Live] checks came from, for its
	// errors.
	places places
}

// places are the blocks' places in the file.
type places struct {
	primary  hcl.Range
	replicas map[string]hcl.Range
}

// at names a place in the file as file:line, or the file alone when the
// place is unknown (a Config not made by [Parse]).
func (c *Config) at(r hcl.Range) string {
	if r.Start.Line == 0 {
		return c.Path
	}
	return fmt.Sprintf("%s:%d", r.Filename, r.Start.Line)
}

// Grafana configures POST /v1/hooks/grafana.
type Grafana struct {
	// WebhookSecret verifies Grafana's HMAC-SHA256 signature; empty means
	// only bearer tokens (scope pause) are accepted.
	WebhookSecret string
	// SignatureHeader and TimestampHeader name Grafana's headers. Default
	// X-Grafana-Alerting-Signature and X-Grafana-Alerting-Timestamp.
	SignatureHeader, TimestampHeader string
	// ReplayWindow is how old a signed timestamp may be. Defaults to 5m.
	ReplayWindow time.Duration
	// HoldTTL is the life of a hold an alert makes, renewed by each
	// repeated notification. Defaults to 1h.
	HoldTTL time.Duration
	// UserHeader, when set, is the header an SSO proxy in front of
	// throttled sets to the signed-in user (for example X-WEBAUTH-USER);
	// the confirm page then trusts it to name the person pausing.
	UserHeader string
	// ReturnURLs are the URL prefixes the confirm page may send a person
	// back to (the Grafana they came from). Their origins are also the
	// only ones a Grafana action may call POST /v1/holds from.
	ReturnURLs []string
	// URL and ServiceAccountToken, when set, make the leader push every
	// hold to Grafana's annotations API as a region, closed on release.
	URL                 string `restart:"grafana url/service_account_token"`
	ServiceAccountToken string `restart:"grafana url/service_account_token"`
	// AllowUnstampedSignatures accepts a signature over the body alone,
	// without a timestamp header: for Grafana versions that sign the body
	// only; such requests can be replayed. Defaults to false: a signed
	// request must carry the timestamp, signed as timestamp + ":" + body.
	AllowUnstampedSignatures bool
}

// shownURL is a URL fit for an error message: its password and query
// (where tokens live) left out, as the value may come from env() or a
// file.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(not a URL)"
	}
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	return u.Redacted()
}

// Load reads and validates the file at path, offline, with every secret
// present (env() of a set variable, a *_file that can be read): what run
// needs.
func Load(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, src, os.Getenv)
}

// LoadWithoutSecrets validates the file at path as Load does, but as a
// linter in CI would, where the secrets are not: an env() of an unset
// variable and a *_file that cannot be read stand for a secret that will
// be there (see [Unset]), and the checks of a secret's content (a DSN
// that parses, a token's length) skip them. Every other check runs.
func LoadWithoutSecrets(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parse(path, src, os.Getenv, true)
}

// unsetPrefix marks a secret LoadWithoutSecrets could not read.
const unsetPrefix = "\x00unset: "

// Unset reports whether s is a secret LoadWithoutSecrets could not read,
// and what it stands for ("environment variable X", "file Y").
func Unset(s string) (string, bool) { return strings.CutPrefix(s, unsetPrefix) }

// InvalidError is a configuration refused by its own content (not by the
// cluster it points at): each line names file:line and what is wrong.
type InvalidError struct{ Err error }

func (e *InvalidError) Error() string { return e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

// evalContext offers env("NAME"), which fails when NAME is unset so a
// missing secret is an error, never an empty password.
func evalContext(getenv func(string) string, withoutSecrets bool) *hcl.EvalContext {
	return &hcl.EvalContext{Functions: map[string]function.Function{
		"env": function.New(&function.Spec{
			Params: []function.Parameter{{Name: "name", Type: cty.String}},
			Type:   function.StaticReturnType(cty.String),
			Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
				name := args[0].AsString()
				v := getenv(name)
				if v == "" && withoutSecrets {
					return cty.StringVal(unsetPrefix + "environment variable " + name), nil
				}
				if v == "" {
					return cty.NilVal, fmt.Errorf("environment variable %s is not set", name)
				}
				return cty.StringVal(v), nil
			},
		}),
	}}
}

// Parse parses src (named filename in errors) and validates it offline.
// getenv resolves env() calls.
func Parse(filename string, src []byte, getenv func(string) string) (*Config, error) {
	return parse(filename, src, getenv, false)
}

func parse(filename string, src []byte, getenv func(string) string, withoutSecrets bool) (*Config, error) {
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.Pos{Line: 1, Column: 1})
	if diags.HasErrors() {
		return nil, &InvalidError{diagError(diags)}
	}
	var doc file
	if diags := gohcl.DecodeBody(f.Body, evalContext(getenv, withoutSecrets), &doc); diags.HasErrors() {
		return nil, &InvalidError{diagError(diags)}
	}
	if body, ok := f.Body.(*hclsyntax.Body); ok {
		doc.attrs = body.Attributes
	}
	sum := sha256.Sum256(src)
	c := &Config{Path: filename, Version: hex.EncodeToString(sum[:6])}
	v := &validator{withoutSecrets: withoutSecrets}
	c.build(&doc, v)
	if len(v.errs) > 0 {
		return nil, &InvalidError{errors.Join(v.errs...)}
	}
	return c, nil
}

// diagError turns HCL diagnostics into one error whose lines name file,
// line and column, and carry HCL's suggestions.
func diagError(diags hcl.Diagnostics) error {
	var errs []error
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		// A failed env() also leaves its attribute unknown, which HCL
		// reports once more in words that say nothing new.
		if d.Summary == "Unsuitable value type" && strings.Contains(d.Detail, "value must be known") {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		if d.Subject != nil {
			msg = fmt.Sprintf("%s:%d,%d: %s", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, msg)
		}
		errs = append(errs, errors.New("config: "+msg))
	}
	return errors.Join(errs...)
}

type validator struct {
	// withoutSecrets: a secret that cannot be read stands for one that
	// will be (LoadWithoutSecrets).
	withoutSecrets bool
	errs           []error
	seen           map[string]hcl.Range // kind and label of each labelled block → its first place
}

func (v *validator) bad(r hcl.Range, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("config: %s:%d: "+format, append([]any{r.Filename, r.Start.Line}, args...)...))
}

// first reports whether the block of kind labelled name at r is the first
// of its kind and label, and refuses any later one naming both places:
// taking the last (or the first) silently would leave the file saying one
// thing and throttled doing another.
func (v *validator) first(r hcl.Range, kind, name string) bool {
	key := kind + " " + name
	if at, dup := v.seen[key]; dup {
		v.bad(r, "%s %q is configured twice, here and at %s:%d; keep one", kind, name, at.Filename, at.Start.Line)
		return false
	}
	if v.seen == nil {
		v.seen = map[string]hcl.Range{}
	}
	v.seen[key] = r
	return true
}

// attr is the place of the top-level attribute name, or the file's start.
func (doc *file) attr(filename, name string) hcl.Range {
	if a, ok := doc.attrs[name]; ok {
		return a.SrcRange
	}
	return hcl.Range{Filename: filename, Start: hcl.Pos{Line: 1, Column: 1}}
}

func (v *validator) duration(r hcl.Range, field string, s *string, def time.Duration) time.Duration {
	if s == nil {
		return def
	}
	d, err := time.ParseDuration(*s)
	if err != nil || d <= 0 {
		v.bad(r, "%s = %q: want a positive duration such as \"3s\" or \"1h\"", field, *s)
		return def
	}
	return d
}

// dsn refuses a connection string pgx cannot parse, naming field (the
// error never holds the password); a secret not read is not checked.
func (v *validator) dsn(r hcl.Range, field, dsn string) {
	if _, unset := Unset(dsn); unset || strings.TrimSpace(dsn) == "" {
		return
	}
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		v.bad(r, "%s: %v", field, err)
	}
}

func (v *validator) secret(r hcl.Range, field string, inline, path *string) string {
	switch {
	case inline != nil && path != nil:
		v.bad(r, "give %s or %s_file, not both", field, field)
	case path != nil:
		b, err := os.ReadFile(*path)
		if err != nil && v.withoutSecrets {
			return unsetPrefix + "file " + *path
		}
		if err != nil {
			v.bad(r, "%s_file: %v", field, err)
			return ""
		}
		return strings.TrimSpace(string(b))
	case inline != nil:
		return *inline
	}
	return ""
}

func (c *Config) build(doc *file, v *validator) {
	if doc.Primary == nil {
		v.errs = append(v.errs, fmt.Errorf("config: %s: a primary block is required", c.Path))
		return
	}
	c.buildCluster(doc, v)
	c.buildPrimary(doc, v)
	c.buildReplicas(doc, v)
	c.buildBouncer(doc, v)
	c.buildCustom(doc, v)
	ruleBlocks := c.buildSignals(doc, v)
	c.buildJobs(doc, v)
	c.buildHolds(doc, v)
	c.buildListen(doc, v)
	c.buildTokens(doc, v)
	c.buildNotifiers(doc, v)
	c.buildGrafana(doc, v)
	c.buildControl(doc, v)
	c.checkController(doc, v, ruleBlocks)
}

// buildCluster reads the cluster's name and the dashboard link.
func (c *Config) buildCluster(doc *file, v *validator) {
	c.Cluster = "postgres"
	if doc.Cluster != nil {
		if *doc.Cluster == "" {
			v.bad(doc.attr(c.Path, "cluster"), "cluster must not be empty; leave it out for \"postgres\"")
		}
		c.Cluster = *doc.Cluster
	}
	if doc.Dashboard != nil {
		c.Dashboard = *doc.Dashboard
	}
	if doc.Runbook != nil {
		if u, err := url.Parse(*doc.Runbook); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Fragment != "" {
			v.bad(doc.attr(c.Path, "runbook_url"), "runbook_url = %q: want an http(s) URL without a #fragment (each page adds its section's anchor, such as #throttledcritical)", *doc.Runbook)
		}
		c.Runbook = *doc.Runbook
	}
}

// buildPrimary reads the primary block: its DSNs and cores.
func (c *Config) buildPrimary(doc *file, v *validator) {
	p := doc.Primary
	c.places = places{primary: p.Range, replicas: map[string]hcl.Range{}}
	// An empty DSN is refused, not passed on: pgx reads "" as the libpq
	// defaults (the local socket, $PGHOST), which is some other server.
	c.PrimaryDSN = v.secret(p.Range, "dsn", p.DSN, p.DSNFile)
	switch {
	case p.DSN == nil && p.DSNFile == nil:
		v.bad(p.Range, "primary: dsn (or dsn_file) is required")
	case p.DSN != nil && p.DSNFile != nil:
		// refused by secret: give one of them
	case strings.TrimSpace(c.PrimaryDSN) == "" && p.DSNFile != nil:
		v.bad(p.Range, "primary: dsn_file %q is empty", *p.DSNFile)
	case strings.TrimSpace(c.PrimaryDSN) == "":
		v.bad(p.Range, "primary: dsn is empty (an env() of an unset or empty variable?)")
	}
	v.dsn(p.Range, "primary: dsn", c.PrimaryDSN)
	c.CoordinationDSN = c.PrimaryDSN
	if p.CoordinationDSN != nil {
		c.CoordinationDSN = *p.CoordinationDSN
		if strings.TrimSpace(c.CoordinationDSN) == "" {
			v.bad(p.Range, "primary: coordination_dsn is empty; leave it out to use dsn")
		}
		v.dsn(p.Range, "primary: coordination_dsn", c.CoordinationDSN)
	}
	if !(p.Cores > 0) || math.IsInf(p.Cores, 0) {
		v.bad(p.Range, "primary: cores must be a positive number of CPU cores, got %v", p.Cores)
	}
	c.Cores = p.Cores
}

// buildReplicas reads the replica blocks: each one's policy and DSN.
func (c *Config) buildReplicas(doc *file, v *validator) {
	c.Replicas, c.ReplicaDSNs = map[string]throttle.ReplicaPolicy{}, map[string]string{}
	for _, r := range doc.Replicas {
		if !v.first(r.Range, "replica", r.Name) {
			continue
		}
		c.places.replicas[r.Name] = r.Range
		policy := throttle.ReplicaOptional
		if r.Policy != nil {
			policy = throttle.ReplicaPolicy(*r.Policy)
		}
		switch policy {
		case throttle.ReplicaRequired, throttle.ReplicaOptional, throttle.ReplicaIgnored:
		default:
			v.bad(r.Range, "replica %q: policy = %q: want required, optional or ignored", r.Name, policy)
		}
		c.Replicas[r.Name] = policy
		if r.DSN != nil {
			if strings.TrimSpace(*r.DSN) == "" {
				v.bad(r.Range, "replica %q: dsn is empty; leave it out to sample the replica from the primary only", r.Name)
			}
			v.dsn(r.Range, fmt.Sprintf("replica %q: dsn", r.Name), *r.DSN)
			c.ReplicaDSNs[r.Name] = *r.DSN
		}
	}
}

// buildJobs reads the job blocks.
func (c *Config) buildJobs(doc *file, v *validator) {
	maint := c.buildMaintenance(doc, v)
	c.Windows = throttle.Windows{}
	for _, j := range doc.Jobs {
		if p := jobname.Problem(j.Name); p != "" {
			v.bad(j.Range, "job %q: name %s", j.Name, p)
		}
		if !v.first(j.Range, "job", j.Name) {
			continue
		}
		job := Job{Name: j.Name, Weight: 1, TargetBatchDuration: v.duration(j.Range, "target_batch_duration", j.TargetBatchDuration, 0)}
		for _, f := range []struct {
			src *float64
			dst *float64
		}{{j.Weight, &job.Weight}, {j.MinRate, &job.MinRate}, {j.MaxRate, &job.MaxRate}} {
			if f.src != nil {
				*f.dst = *f.src
			}
		}
		if j.Weight != nil && *j.Weight == 0 {
			v.bad(j.Range, "job %q: weight must be positive, got 0 (leave it out for 1)", j.Name)
		}
		for _, p := range jobname.LimitProblems(job.Weight, job.MinRate, job.MaxRate, jobname.LimitNames{Weight: "weight", MinRate: "min_rate", MaxRate: "max_rate"}) {
			v.bad(j.Range, "job %q: %s", j.Name, p)
		}
		if j.MinBatchSize != nil {
			job.MinBatchSize = *j.MinBatchSize
		}
		if j.MaxBatchSize != nil {
			job.MaxBatchSize = *j.MaxBatchSize
		}
		if job.MinBatchSize < 0 || job.MaxBatchSize < 0 || (job.MaxBatchSize > 0 && job.MinBatchSize > job.MaxBatchSize) {
			v.bad(j.Range, "job %q: batch sizes min %d and max %d must be positive with min not above max", j.Name, job.MinBatchSize, job.MaxBatchSize)
		}
		for _, t := range j.Tables {
			if strings.TrimSpace(t) == "" || strings.Count(signals.TableName(t), ".") != 1 && !strings.Contains(t, `"`) {
				v.bad(j.Range, "job %q: tables: %q is not a table name; want schema.table or table (in public)", j.Name, t)
				continue
			}
			job.Tables = append(job.Tables, signals.TableName(t))
		}
		if j.Signals != nil {
			job.Signals = []string{}
		}
		for _, n := range j.Signals {
			_, rule := c.JobRules[signals.Name(n)]
			switch name := signals.Name(n); {
			case rule:
				job.Signals = append(job.Signals, n)
			case signals.Known(name) && !c.jobRule(name):
				v.bad(j.Range, "job %q: signals: %q is a cluster signal: it paces every job, whatever a job says; a job names job rules (vacuum_running, antiwraparound_vacuums, custom signals)", j.Name, n)
			default:
				v.bad(j.Range, "job %q: signals: %q has no signal block with a target; %s", j.Name, n, c.jobRuleNames())
			}
		}
		c.buildWindows(j, maint, v)
		if slices.Contains(job.Signals, string(signals.VacuumRunning)) && len(job.Tables) == 0 {
			v.bad(j.Range, "job %q: signals names vacuum_running but tables is empty: it would never bind; list the tables the job writes", j.Name)
		}
		c.Jobs = append(c.Jobs, job)
	}
}

// buildMaintenance reads the maintenance blocks: named windows.
func (c *Config) buildMaintenance(doc *file, v *validator) map[string]throttle.Window {
	out := map[string]throttle.Window{}
	for _, m := range doc.Maint {
		if !v.first(m.Range, "maintenance", m.Name) {
			continue
		}
		if p := jobname.Problem(m.Name); p != "" {
			v.bad(m.Range, "maintenance %q: name %s", m.Name, p)
		}
		w, err := throttle.ParseWindow(m.Window)
		if err != nil {
			v.bad(m.Range, "maintenance %q: %v", m.Name, err)
			continue
		}
		out[m.Name] = w
	}
	return out
}

// buildWindows reads a job's run_windows and the maintenance windows it
// avoids.
func (c *Config) buildWindows(j jobBlock, maint map[string]throttle.Window, v *validator) {
	var jw throttle.JobWindows
	for _, spec := range j.RunWindows {
		w, err := throttle.ParseWindow(spec)
		if err != nil {
			v.bad(j.Range, "job %q: run_windows: %v", j.Name, err)
			continue
		}
		jw.Run = append(jw.Run, w)
	}
	for _, name := range j.Avoid {
		w, ok := maint[name]
		if !ok {
			known := slices.Sorted(maps.Keys(maint))
			v.bad(j.Range, "job %q: avoid: no maintenance block %q (maintenance blocks: %v)", j.Name, name, known)
			continue
		}
		if jw.Avoid == nil {
			jw.Avoid = map[string]throttle.Window{}
		}
		jw.Avoid[name] = w
	}
	if len(jw.Run) > 0 || len(jw.Avoid) > 0 {
		c.Windows[throttle.Job(j.Name)] = jw
	}
}

// buildHolds reads the holds block: the default and maximum TTL, checked
// by the one rule for a hold's life (throttle.TTLPolicy): an unset
// default_ttl is 1h or max_ttl if shorter, a set one over max_ttl is
// refused.
func (c *Config) buildHolds(doc *file, v *validator) {
	var p throttle.TTLPolicy
	if h := doc.Holds; h != nil {
		p.Default = v.duration(h.Range, "default_ttl", h.DefaultTTL, 0)
		p.Max = v.duration(h.Range, "max_ttl", h.MaxTTL, 0)
		if err := p.Check(); err != nil {
			for _, e := range strings.Split(err.Error(), "\n") {
				e = strings.NewReplacer("default TTL", "default_ttl", "max TTL", "max_ttl").Replace(e)
				v.bad(h.Range, "holds: %s", e)
			}
			p = throttle.TTLPolicy{}
		}
	}
	c.HoldTTL = p.Filled()
}

// buildListen reads the listen block: address, TLS, open reads and the request cap.
func (c *Config) buildListen(doc *file, v *validator) {
	c.MaxConcurrent = 64
	if l := doc.Listen; l != nil {
		if p := listenProblem(l.Address); p != "" {
			v.bad(l.Range, "listen: address = %q: %s; want host:port, such as \"127.0.0.1:18087\"", l.Address, p)
		}
		c.Listen = l.Address
		if (l.TLSCert == nil) != (l.TLSKey == nil) {
			v.bad(l.Range, "listen: give both tls_cert and tls_key, or neither")
		}
		if l.TLSCert != nil {
			c.TLSCert, c.TLSKey = *l.TLSCert, *l.TLSKey
		}
		if l.OpenChecks != nil {
			c.OpenChecks = *l.OpenChecks
		}
		if l.OpenReads != nil {
			c.OpenReads = *l.OpenReads
		}
		if l.MaxRequest != nil {
			if *l.MaxRequest < 1 {
				v.bad(l.Range, "listen: max_concurrent_requests must be at least 1, got %d", *l.MaxRequest)
			}
			c.MaxConcurrent = *l.MaxRequest
		}
	}
}

// buildTokens reads the token blocks: one secret per token, known scopes.
func (c *Config) buildTokens(doc *file, v *validator) {
	secrets := map[string]string{} // secret → the token that has it
	for _, t := range doc.Tokens {
		if !v.first(t.Range, "token", t.Name) {
			continue
		}
		// A token's name is the actor of every hold it places
		// ("token:NAME"): a name a hold would refuse makes every one of
		// them fail.
		if p := textsafe.Problem(t.Name); p != "" {
			v.bad(t.Range, "token \"%s\": name has a %s; a token's name is one printable line", textsafe.Line(t.Name), p)
		}
		secret := v.secret(t.Range, "secret", t.Secret, t.SecretFile)
		if _, unset := Unset(secret); !unset && len(secret) < 16 {
			v.bad(t.Range, "token %q: the secret must be at least 16 characters (from env() or secret_file)", t.Name)
		}
		// One secret, one token: otherwise which scopes a request gets
		// would depend on the order of the blocks.
		if other, dup := secrets[secret]; dup && secret != "" {
			v.bad(t.Range, "token %q has the same secret as token %q; give each token its own", t.Name, other)
		}
		secrets[secret] = t.Name
		tok := Token{Name: t.Name, Secret: secret}
		for _, s := range t.Scopes {
			switch Scope(s) {
			case ScopeRead, ScopePause, ScopeAdmin, ScopeWork:
				tok.Scopes = append(tok.Scopes, Scope(s))
			default:
				v.bad(t.Range, "token %q: scope %q: want read, pause, admin or work", t.Name, s)
			}
		}
		c.Tokens = append(c.Tokens, tok)
	}
}

// buildNotifiers reads the notifier blocks.
func (c *Config) buildNotifiers(doc *file, v *validator) {
	for _, n := range doc.Notifiers {
		// Two notifiers of one kind may page two places; the same kind
		// and URL twice would page one place twice.
		if !v.first(n.Range, "notifier", n.Kind+" to "+shownURL(n.URL)) {
			continue
		}
		if !slices.Contains(page.Kinds, n.Kind) {
			v.bad(n.Range, "notifier %q: want %s", n.Kind, strings.Join(page.Kinds, ", "))
		}
		if !strings.HasPrefix(n.URL, "http://") && !strings.HasPrefix(n.URL, "https://") {
			v.bad(n.Range, "notifier %q: url = %q: want an http(s) URL", n.Kind, shownURL(n.URL))
		}
		c.Notifiers = append(c.Notifiers, Notifier{Kind: n.Kind, URL: n.URL, Secret: v.secret(n.Range, "secret", n.Secret, n.SecretFile)})
	}
}

// buildGrafana reads the grafana block.
func (c *Config) buildGrafana(doc *file, v *validator) {
	c.Grafana = Grafana{SignatureHeader: "X-Grafana-Alerting-Signature", TimestampHeader: "X-Grafana-Alerting-Timestamp",
		ReplayWindow: 5 * time.Minute, HoldTTL: time.Hour}
	if g := doc.Grafana; g != nil {
		c.Grafana.WebhookSecret = v.secret(g.Range, "webhook_secret", g.WebhookSecret, g.WebhookSecretFile)
		if _, unset := Unset(c.Grafana.WebhookSecret); !unset && c.Grafana.WebhookSecret != "" && len(c.Grafana.WebhookSecret) < 16 {
			v.bad(g.Range, "grafana: webhook_secret must be at least 16 characters")
		}
		if g.SignatureHeader != nil {
			c.Grafana.SignatureHeader = *g.SignatureHeader
		}
		if g.TimestampHeader != nil {
			c.Grafana.TimestampHeader = *g.TimestampHeader
		}
		c.Grafana.ReplayWindow = v.duration(g.Range, "replay_window", g.ReplayWindow, c.Grafana.ReplayWindow)
		c.Grafana.HoldTTL = v.duration(g.Range, "hold_ttl", g.HoldTTL, c.Grafana.HoldTTL)
		if g.UserHeader != nil {
			c.Grafana.UserHeader = http.CanonicalHeaderKey(strings.TrimSpace(*g.UserHeader))
			if c.Grafana.UserHeader == "" || strings.ContainsAny(c.Grafana.UserHeader, " :") {
				v.bad(g.Range, "grafana: user_header = %q: want a header name such as X-WEBAUTH-USER", *g.UserHeader)
			}
		}
		for _, r := range g.ReturnURLs {
			u, err := url.Parse(r)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				v.bad(g.Range, "grafana: return_urls: %q: want an absolute http(s) URL such as https://grafana.example.com/", r)
				continue
			}
			c.Grafana.ReturnURLs = append(c.Grafana.ReturnURLs, r)
		}
		c.Grafana.ServiceAccountToken = v.secret(g.Range, "service_account_token", g.SAToken, g.SATokenFile)
		if g.AllowUnstamped != nil {
			c.Grafana.AllowUnstampedSignatures = *g.AllowUnstamped
		}
		if g.URL != nil {
			u, err := url.Parse(*g.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
				v.bad(g.Range, "grafana: url = %q: want Grafana's base URL such as https://grafana.example.com", shownURL(*g.URL))
			}
			c.Grafana.URL = strings.TrimRight(*g.URL, "/")
		}
		switch {
		case c.Grafana.URL != "" && c.Grafana.ServiceAccountToken == "":
			v.bad(g.Range, "grafana: url needs service_account_token (or service_account_token_file): a Grafana service account token that may write annotations")
		case c.Grafana.URL == "" && c.Grafana.ServiceAccountToken != "":
			v.bad(g.Range, "grafana: service_account_token needs url, Grafana's base URL")
		}
		if c.Grafana.HoldTTL > c.HoldTTL.Max {
			v.bad(g.Range, "grafana: hold_ttl %s exceeds the holds' max_ttl %s", c.Grafana.HoldTTL, c.HoldTTL.Max)
		}
	}
}

// buildControl reads the controller block.
func (c *Config) buildControl(doc *file, v *validator) {
	if ctl := doc.Control; ctl != nil {
		if ctl.MaxBudget != nil {
			if !(*ctl.MaxBudget > 0) || math.IsInf(*ctl.MaxBudget, 0) {
				v.bad(ctl.Range, "controller: max_budget must be a positive number, got %v", *ctl.MaxBudget)
			}
			c.MaxBudget = *ctl.MaxBudget
		}
		c.QuietPeriod = v.duration(ctl.Range, "quiet_period", ctl.QuietPeriod, 0)
		if ctl.ForegroundLatency != nil {
			c.NoForegroundLatency = !*ctl.ForegroundLatency
		}
	}
}

// buildSignals reads the signal blocks over the default rules and
// returns where each block is, for the controller's errors.
func (c *Config) buildSignals(doc *file, v *validator) map[signals.Name]hcl.Range {
	c.Rules = throttle.DefaultRules()
	c.JobRules = map[signals.Name]throttle.Rule{}
	ruleBlocks := map[signals.Name]hcl.Range{}
	for _, s := range doc.Signals {
		name := signals.Name(s.Name)
		if !signals.Known(name) && !c.custom(name) {
			v.bad(s.Range, "signal %q: unknown; signals are %v and the custom_signal blocks", s.Name, signals.Names)
			continue
		}
		if !v.first(s.Range, "signal", s.Name) {
			continue
		}
		if c.jobRule(name) {
			c.buildJobRule(s, v)
			continue
		}
		ruleBlocks[name] = s.Range
		r := throttle.Rule{Target: s.Target, MaxAge: v.duration(s.Range, "max_age", s.MaxAge, 0)}
		// An omitted critical keeps the signal's default one: a block that
		// only moves the target must not drop the auto-pause (critical = 0
		// turns it off, in so many words).
		if s.Critical != nil {
			r.Critical = *s.Critical
		} else if def, ok := c.Rules[name]; ok {
			r.Critical = def.Critical
		}
		if s.Required != nil {
			r.Required = *s.Required
		} else if def, ok := c.Rules[name]; ok {
			r.Required = def.Required
		}
		c.Rules[name] = r
	}
	return ruleBlocks
}

// jobRule reports whether a rule on name binds jobs one by one (a gate)
// rather than the shared budget: a vacuum on the job's tables, an
// anti-wraparound vacuum, a custom signal.
func (c *Config) jobRule(name signals.Name) bool {
	return name == signals.VacuumRunning || name == signals.AntiWraparoundVacuums || c.custom(name)
}

func (c *Config) custom(name signals.Name) bool {
	return slices.ContainsFunc(c.Custom, func(x signals.CustomSignal) bool { return x.Name == name })
}

// jobRuleNames lists the job rules configured, for errors.
func (c *Config) jobRuleNames() string {
	if len(c.JobRules) == 0 {
		return "none are configured"
	}
	var names []string
	for _, n := range slices.Sorted(maps.Keys(c.JobRules)) {
		names = append(names, string(n))
	}
	return "job rules are " + strings.Join(names, ", ")
}

// buildJobRule reads a signal block on a job-scoped signal: a gate, so a
// target of 0 is allowed (vacuum_running: any vacuum), and neither a
// critical level nor required = false is.
func (c *Config) buildJobRule(s signalBlock, v *validator) {
	name := signals.Name(s.Name)
	r := throttle.Rule{Target: s.Target, MaxAge: v.duration(s.Range, "max_age", s.MaxAge, 0), Required: true}
	if !(s.Target >= 0) || math.IsInf(s.Target, 0) {
		v.bad(s.Range, "signal %q: target must be 0 or more, got %v", s.Name, s.Target)
	}
	if s.Critical != nil {
		v.bad(s.Range, "signal %q: takes no critical level: it pauses only the jobs it binds (a job's signals, its tables); a level that should pause every job is a cluster signal's", s.Name)
	}
	if s.Required != nil && !*s.Required {
		v.bad(s.Range, "signal %q: required = false: a job rule always fails closed (unknown or stale shuts the job)", s.Name)
	}
	if cs := slices.IndexFunc(c.Custom, func(x signals.CustomSignal) bool { return x.Name == name }); cs >= 0 && s.MaxAge != nil && r.MaxAge <= c.Custom[cs].Every {
		v.bad(s.Range, "signal %q: max_age %s must exceed the custom signal's every %s, or every reading is stale before the next", s.Name, r.MaxAge, c.Custom[cs].Every)
	}
	if cs := slices.IndexFunc(c.Custom, func(x signals.CustomSignal) bool { return x.Name == name }); cs >= 0 && s.MaxAge == nil {
		// A custom signal is read every `every`: by default it may be two
		// readings and a timeout old.
		r.MaxAge = 2*c.Custom[cs].Every + c.Custom[cs].Timeout
	}
	c.JobRules[name] = r
}

// buildBouncer reads the pgbouncer block.
func (c *Config) buildBouncer(doc *file, v *validator) {
	b := doc.Bouncer
	if b == nil {
		return
	}
	c.PgBouncerDSN = v.secret(b.Range, "dsn", b.DSN, b.DSNFile)
	if b.DSN == nil && b.DSNFile == nil || strings.TrimSpace(c.PgBouncerDSN) == "" {
		v.bad(b.Range, "pgbouncer: dsn (or dsn_file) is required and must not be empty: the admin console, such as postgres://throttled_monitor@pgbouncer:6432/pgbouncer")
		return
	}
	v.dsn(b.Range, "pgbouncer: dsn", c.PgBouncerDSN)
}

// buildCustom reads the custom_signal blocks.
func (c *Config) buildCustom(doc *file, v *validator) {
	for _, b := range doc.Customs {
		if !v.first(b.Range, "custom_signal", b.Name) {
			continue
		}
		cs := signals.CustomSignal{Name: signals.Name(b.Name), Query: b.Query, Source: c.at(b.Range),
			Timeout: v.duration(b.Range, "timeout", b.Timeout, signals.DefaultCustomTimeout),
			Every:   v.duration(b.Range, "every", b.Every, signals.DefaultCustomEvery)}
		if b.Unit != nil {
			cs.Unit = signals.Unit(*b.Unit)
		}
		for _, p := range cs.Problems() {
			v.bad(b.Range, "custom_signal %q: %s", b.Name, p)
		}
		c.Custom = append(c.Custom, cs)
	}
}

// checkController runs the controller's own validation, the one judge of
// the rules and budgets it takes, so no configuration it would refuse is
// ever accepted here; and it says what it refuses at the block that set
// it, in the file's words. Each signal rule is judged alone first, so a
// refusal belongs to its block; what the whole is refused for after that
// can only come from the controller block.
func (c *Config) checkController(doc *file, v *validator, ruleBlocks map[signals.Name]hcl.Range) {
	refused := false
	for _, name := range slices.Sorted(maps.Keys(ruleBlocks)) {
		r := c.Rules[name]
		_, err := throttle.New(throttle.Config{Rules: map[signals.Name]throttle.Rule{name: r}})
		if err == nil {
			continue
		}
		refused = true
		problems := ruleProblems(name, r)
		if len(problems) == 0 {
			problems = []string{err.Error()}
		}
		for _, p := range problems {
			v.bad(ruleBlocks[name], "signal %q: %s", name, p)
		}
	}
	if refused {
		return
	}
	if at, ok := ruleBlocks[signals.ForegroundLatency]; ok && c.NoForegroundLatency {
		v.bad(at, "signal %q: a rule on it, and the controller block's foreground_latency = false: one or the other", signals.ForegroundLatency)
		return
	}
	if _, err := throttle.New(c.ControllerConfig()); err != nil {
		at := doc.Primary.Range
		if doc.Control != nil {
			at = doc.Control.Range
		}
		v.bad(at, "controller: %v", err)
	}
}

// ControllerConfig is the controller configuration this file describes.
func (c *Config) ControllerConfig() throttle.Config {
	return throttle.Config{Rules: c.Rules, JobRules: c.JobRules, Replicas: c.Replicas, MaxBudget: c.MaxBudget, QuietPeriod: c.QuietPeriod}
}

// Token returns the token whose secret is secret, comparing in constant
// time against every configured token.
func (c *Config) Token(secret string) (Token, bool) {
	return lookupToken(c.Tokens, secret)
}
