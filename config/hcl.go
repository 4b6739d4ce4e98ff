package config

import (
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// file is the HCL document.
type file struct {
	Cluster     *string           `hcl:"cluster,optional"`
	Dashboard   *string           `hcl:"dashboard_url,optional"`
	Runbook     *string           `hcl:"runbook_url,optional"`
	Primary     *primaryBlock     `hcl:"primary,block"`
	Replicas    []replicaBlock    `hcl:"replica,block"`
	Signals     []signalBlock     `hcl:"signal,block"`
	Customs     []customBlock     `hcl:"custom_signal,block"`
	Maint       []maintBlock      `hcl:"maintenance,block"`
	Bouncer     *bouncerBlock     `hcl:"pgbouncer,block"`
	Prom        *promBlock        `hcl:"prometheus,block"`
	PromSignals []promSignalBlock `hcl:"prometheus_signal,block"`
	Jobs        []jobBlock        `hcl:"job,block"`
	Holds       *holdsBlock       `hcl:"holds,block"`
	Listen      *listenBlock      `hcl:"listen,block"`
	Tokens      []tokenBlock      `hcl:"token,block"`
	Notifiers   []notifierBlock   `hcl:"notifier,block"`
	Control     *controllerBlock  `hcl:"controller,block"`
	Grafana     *grafanaBlock     `hcl:"grafana,block"`

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
	Name     string   `hcl:"name,label"`
	Target   float64  `hcl:"target"`
	Critical *float64 `hcl:"critical,optional"`
	MaxAge   *string  `hcl:"max_age,optional"`
	Required *bool    `hcl:"required,optional"`
	// Baseline is a Prometheus signal's: "job-free" or "none".
	Baseline *string   `hcl:"baseline,optional"`
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
	ID         *string   `hcl:"id,optional"`
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

// attr is the place of the top-level attribute name, or the file's start.
func (doc *file) attr(filename, name string) hcl.Range {
	if a, ok := doc.attrs[name]; ok {
		return a.SrcRange
	}
	return hcl.Range{Filename: filename, Start: hcl.Pos{Line: 1, Column: 1}}
}
