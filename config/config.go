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
	"math"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
)

// Config is a loaded, validated configuration.
type Config struct {
	// Path is the file it came from; Version a digest of its text.
	Path, Version string
	// LiveWarnings are what [Config.Live] found that does not keep run
	// from starting: a Prometheus signal no required rule reads that
	// could not be read, each at its block's file:line.
	LiveWarnings []string

	// Fields tagged restart take effect only when throttled restarts; a
	// reload that changes one is refused, naming it (see [RestartOnly]).
	// Every other field a reload applies.
	PrimaryDSN      string `restart:"primary dsn"`
	CoordinationDSN string `restart:"coordination_dsn"`
	// coordinationIsDSN: coordination_dsn was left out, so it is dsn.
	coordinationIsDSN bool
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
	Windows hold.Windows
	// Custom are the custom signals, each with its file:line as Source.
	Custom CustomSignals `restart:"custom_signal"`
	// Prometheus is where the Prometheus signals are read, and the
	// signals, each with its file:line as Source; their rules are in
	// Rules (a ratio rule with baseline = "job-free").
	Prometheus PrometheusSignals `restart:"prometheus/prometheus_signal"`
	Jobs       []Job
	// HoldTTL is the holds block's default_ttl and max_ttl, filled:
	// `throttled run` writes it as the cluster's hold policy.
	HoldTTL hold.TTLPolicy `restart:"holds default_ttl/max_ttl"`
	Listen  string         `restart:"listen address"`
	TLSCert string         `restart:"tls_cert/tls_key"`
	TLSKey  string         `restart:"tls_cert/tls_key"`
	// SidecarID names this sidecar (listen { id }): the tokens it grants
	// remote workers are kept under it in throttled.grants, and a
	// restart under the same id takes them up again. "" for none: they
	// are kept under the host name and the socket Listen binds. Give it
	// where the host name changes across restarts (a pod rescheduled
	// under a new name, a replaced VM) and the sidecar is the same one.
	SidecarID string `restart:"listen id"`
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
	prom     hcl.Range
}

// at names a place in the file as file:line, or the file alone when the
// place is unknown (a Config not made by [Parse]).
func (c *Config) at(r hcl.Range) string {
	if r.Start.Line == 0 {
		return c.Path
	}
	return fmt.Sprintf("%s:%d", r.Filename, r.Start.Line)
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
	c.buildPrometheus(doc, v)
	if doc.Prom != nil {
		c.places.prom = doc.Prom.Range
	}
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
	c.CoordinationDSN, c.coordinationIsDSN = c.PrimaryDSN, p.CoordinationDSN == nil
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

// ControllerConfig is the controller configuration this file describes.
func (c *Config) ControllerConfig() throttle.Config {
	return throttle.Config{Rules: c.Rules, JobRules: c.JobRules, Replicas: c.Replicas, MaxBudget: c.MaxBudget, QuietPeriod: c.QuietPeriod, External: c.promNames()}
}
