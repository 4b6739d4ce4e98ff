package jobs

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled/internal/jobname"
)

// Config configures a [Job]. The zero value of every field but Name means
// its default.
type Config struct {
	// Name identifies the job: 1 to 53 characters of a-z, 0-9, '_', '.'
	// and '-'. Its sessions carry application_name "throttled:<Name>", so
	// throttled can see them on the primary. Required.
	Name string
	// Weight is the job's share of the budget relative to other jobs.
	// Defaults to 1. MinRate and MaxRate (batches per second, 0 for none)
	// bound its rate. The code that registers the job with the controller
	// passes them on.
	Weight, MinRate, MaxRate float64
	// Tables are the tables the job writes, as schema.table (public when
	// the schema is left out). A job rule on vacuum_running pauses the job
	// while a vacuum runs on one of them, and on no other table.
	Tables []string
	// Signals, when not nil, names the job rules that bind the job (for
	// example vacuum_running, or a custom signal); nil means every job
	// rule. The cluster's rules bind every job whatever this says.
	Signals []string
	// TargetBatchDuration is the duration the batch size adapts toward.
	// Defaults to 1s. While a signal of the foreground's latency binds
	// the job (foreground_latency, or a Prometheus signal: the pacer's
	// status.Explainer says, or its Stretcher says the canary is over its
	// target), the target shrinks: halved when the signal is first read
	// holding or cutting the budget, and again every second it stays so,
	// down to [LatencyFloor] (50 ms), before the cut rate reaches its
	// least; held while the signal binds under its target; doubled back
	// every 30 s once none binds. Signals of the primary (load,
	// connections, replica lag) cut the rate alone. [Status] shows the
	// target in force.
	TargetBatchDuration time.Duration
	// MinBatchSize and MaxBatchSize bound the batch size. Default 1 and
	// 10000.
	MinBatchSize, MaxBatchSize int
	// InitialBatchSize is the first batch's size. Defaults to 100, within
	// the bounds.
	InitialBatchSize int
	// StatementTimeout bounds every statement of a batch (SET LOCAL
	// statement_timeout). Defaults to 5s.
	StatementTimeout time.Duration
	// MaxAttempts is how many times one batch is tried before the job
	// fails. Defaults to 5.
	MaxAttempts int
	// RetryBackoff and MaxRetryBackoff shape the full-jitter exponential
	// backoff between attempts. Default 100ms and 10s.
	RetryBackoff, MaxRetryBackoff time.Duration
	// MaxOutage is how long the job rides out a database it cannot reach
	// (a failover, a restart: see [Unreachable]) before it fails. A batch
	// that cannot begin for that reason spends neither MaxAttempts nor the
	// retry budget: it says nothing about the batch, and a job that gave up within the seconds a
	// failover takes would have to be restarted by hand after every one.
	// The attempts meanwhile back off as any retry does and wait for the
	// pacer, which pauses while the primary cannot be sampled. A pacer
	// that holds the job does not hide an outage: a wait longer than
	// MaxOutage/4 (at least 1s, at most 30s) probes the database with a
	// transaction begun and rolled back, and an outage the probes see
	// ends the job too. Defaults to 2m.
	MaxOutage time.Duration
	// Checkpoint persists the job's position, batches and rows in
	// throttled.checkpoints in the same transaction as each batch, so a
	// restarted job resumes exactly after the last committed batch. Run
	// creates the table (migrations) when it is missing.
	Checkpoint bool
	// Total is the number of rows the job expects to process, for the ETA;
	// 0 when unknown.
	Total int64
	// Logger receives the job's events. Defaults to a null logger.
	Logger hclog.Logger
}

// Validate reports what is wrong with cfg, with its defaults filled in,
// as [New] would refuse it: every problem, each naming the field and its
// value.
func (cfg Config) Validate() error { return errors.Join(cfg.withDefaults().problems()...) }

// withDefaults returns cfg with every zero field that has a default set
// to it.
func (cfg Config) withDefaults() Config {
	cfg.TargetBatchDuration = cmp.Or(cfg.TargetBatchDuration, time.Second)
	cfg.MinBatchSize = cmp.Or(cfg.MinBatchSize, 1)
	cfg.MaxBatchSize = cmp.Or(cfg.MaxBatchSize, 10000)
	cfg.InitialBatchSize = cmp.Or(cfg.InitialBatchSize, max(cfg.MinBatchSize, min(cfg.MaxBatchSize, 100)))
	cfg.StatementTimeout = cmp.Or(cfg.StatementTimeout, 5*time.Second)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, 5)
	cfg.RetryBackoff = cmp.Or(cfg.RetryBackoff, 100*time.Millisecond)
	cfg.MaxRetryBackoff = cmp.Or(cfg.MaxRetryBackoff, 10*time.Second)
	cfg.MaxOutage = cmp.Or(cfg.MaxOutage, 2*time.Minute)
	return cfg
}

// problems lists what is wrong with cfg, whose defaults are filled.
func (cfg Config) problems() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("jobs: job %q: "+format, append([]any{cfg.Name}, args...)...))
	}
	if p := jobname.Problem(cfg.Name); p != "" {
		bad("Name %s", p)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"TargetBatchDuration", cfg.TargetBatchDuration}, {"StatementTimeout", cfg.StatementTimeout},
		{"RetryBackoff", cfg.RetryBackoff}, {"MaxRetryBackoff", cfg.MaxRetryBackoff}, {"MaxOutage", cfg.MaxOutage}} {
		if d.v < 0 {
			bad("%s must not be negative, got %s", d.name, d.v)
		}
	}
	// PostgreSQL counts statement_timeout in whole milliseconds (0 turns
	// it off), and a batch's deadline is four of them plus a margin.
	if cfg.StatementTimeout > 0 && (cfg.StatementTimeout < time.Millisecond || cfg.StatementTimeout > time.Hour) {
		bad("StatementTimeout must be between 1ms and 1h, got %s", cfg.StatementTimeout)
	}
	switch {
	case cfg.MinBatchSize < 1:
		bad("MinBatchSize must be at least 1, got %d", cfg.MinBatchSize)
	case cfg.MaxBatchSize < cfg.MinBatchSize:
		bad("MaxBatchSize %d must not be below MinBatchSize %d", cfg.MaxBatchSize, cfg.MinBatchSize)
	case cfg.InitialBatchSize < cfg.MinBatchSize || cfg.InitialBatchSize > cfg.MaxBatchSize:
		bad("InitialBatchSize %d must lie within MinBatchSize %d and MaxBatchSize %d", cfg.InitialBatchSize, cfg.MinBatchSize, cfg.MaxBatchSize)
	}
	if cfg.MaxAttempts < 1 {
		bad("MaxAttempts must be at least 1, got %d", cfg.MaxAttempts)
	}
	for _, p := range jobname.LimitProblems(cfg.Weight, cfg.MinRate, cfg.MaxRate, jobname.LimitNames{Weight: "Weight", MinRate: "MinRate", MaxRate: "MaxRate"}) {
		bad("%s", p)
	}
	if cfg.Total < 0 {
		bad("Total must not be negative, got %d", cfg.Total)
	}
	return errs
}
