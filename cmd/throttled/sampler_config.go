package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/throttle"
)

// use is what a command that takes --config does with one kind of block
// of the file.
type use int

const (
	// honoured: the command applies what the block says.
	honoured use = iota + 1
	// refused: the command refuses a file that holds the block, naming
	// the block's file:line and the command that honours it.
	refused
	// notApplicable: the block says nothing the command does (why says
	// why), so the command has nothing of it to honour.
	notApplicable
)

// blockUse is a command's declared treatment of one kind of block: for
// honoured, what the command does with it; for refused, the command that
// honours it; for notApplicable, why it does not apply.
type blockUse struct {
	use use
	why string
}

// configCommands are the commands that read a configuration file's
// blocks. The commands on holds (pause, throttle, exempt, resume, holds,
// status, audit) take --config for the primary's coordination_dsn alone:
// they make and read holds, and pace nothing.
var configCommands = []string{"run", "check-config", "exec", "signals"}

// The treatments every command that paces shares: run and check-config
// take every block, and the sidecar's API blocks pace nothing.
var (
	runs    = blockUse{honoured, "the sidecar applies it"}
	checks  = blockUse{honoured, "validated as run validates it (with --live, against the cluster)"}
	apiOnly = blockUse{notApplicable, "the sidecar's own: its HTTP API, tokens, pages and hold lifetimes; it paces no job"}
	paces   = blockUse{notApplicable, "it only paces jobs, and a display of the signals paces none"}
)

// blockUses is, for every kind of block a configuration file may hold
// (config/hcl.go), what each of configCommands does with it. A block
// that paces or protects a job is honoured by every command that runs a
// job (run, exec), and a command that cannot honour it refuses it: a block
// ignored is a loss of protection nobody sees. exec and signals refuse a
// block of a kind missing here, and a test holds the table complete.
var blockUses = map[string]map[string]blockUse{
	"primary": {"run": runs, "check-config": checks,
		"exec":    {honoured, "samples the primary (dsn, cores); follows the holds and the leader in coordination_dsn, when the file gives one"},
		"signals": {honoured, "samples the primary (dsn, cores)"}},
	"replica": {"run": runs, "check-config": checks,
		"exec":    {honoured, "each replica's policy (required, optional, ignored) and dsn"},
		"signals": {honoured, "the required replicas, and the dsns it samples"}},
	"signal": {"run": runs, "check-config": checks,
		"exec":    {honoured, "the rules and job rules the job is paced and gated by"},
		"signals": {honoured, "the target and max_age of each custom and Prometheus signal it shows"}},
	"custom_signal": {"run": runs, "check-config": checks,
		"exec":    {honoured, "sampled, for the rules on them"},
		"signals": {honoured, "sampled and shown with its file:line"}},
	"maintenance": {"run": runs, "check-config": checks,
		"exec":    {honoured, "the windows the job (a job block named as --job) avoids hold it"},
		"signals": paces},
	"pgbouncer": {"run": runs, "check-config": checks,
		"exec":    {honoured, "its pools count in connection_headroom"},
		"signals": {honoured, "its pools are sampled and shown"}},
	"prometheus": {"run": runs, "check-config": checks,
		"exec":    {honoured, "where the Prometheus signals are read, with its credentials"},
		"signals": {honoured, "where the Prometheus signals are read, with its credentials"}},
	"prometheus_signal": {"run": runs, "check-config": checks,
		"exec":    {honoured, "sampled, for the rules on them; a required one unreadable keeps the job from starting"},
		"signals": {honoured, "sampled and shown with its file:line"}},
	"job": {"run": runs, "check-config": checks,
		"exec":    {honoured, "the block named as --job: its rates, weight, tables, job rules, batch bounds and windows"},
		"signals": paces},
	"controller": {"run": runs, "check-config": checks,
		"exec":    {honoured, "max_budget, quiet_period and foreground_latency"},
		"signals": paces},
	"holds":    {"run": runs, "check-config": checks, "exec": apiOnly, "signals": apiOnly},
	"listen":   {"run": runs, "check-config": checks, "exec": apiOnly, "signals": apiOnly},
	"token":    {"run": runs, "check-config": checks, "exec": apiOnly, "signals": apiOnly},
	"notifier": {"run": runs, "check-config": checks, "exec": apiOnly, "signals": apiOnly},
	"grafana":  {"run": runs, "check-config": checks, "exec": apiOnly, "signals": apiOnly},
}

// refuseBlocks refuses the blocks of the file at path that command does
// not honour and must not ignore: each its declaration in uses refuses,
// and each of a kind it has no declaration for. Each is named at its
// file:line.
func refuseBlocks(command, path string, uses map[string]map[string]blockUse) error {
	blocks, err := config.Blocks(path)
	if err != nil {
		return err
	}
	var errs []error
	for _, b := range blocks {
		switch u, ok := uses[b.Kind][command]; {
		case !ok:
			errs = append(errs, fmt.Errorf("--config %s: a %s block, which throttled %s does not know: refused rather than ignored", b.At, b.Kind, command))
		case u.use == refused:
			errs = append(errs, fmt.Errorf("--config %s: a %s block, which throttled %s cannot honour: %s does", b.At, b.Kind, command, u.why))
		}
	}
	return usageError(errors.Join(errs...))
}

// secretSet refuses a secret of the file that LoadWithoutSecrets could
// not read (config.Unset) and the command uses: what names it in words.
func secretSet(path, what, secret string) error {
	if how, unset := config.Unset(secret); unset {
		return usageError(fmt.Errorf("--config %s: %s is %s, which is not set", path, what, how))
	}
	return nil
}

// samplerConfig is what signals takes from a sidecar's configuration
// file for the flags not given: the primary's DSN and cores, the
// replicas (required ones, and those sampled directly) and the PgBouncer.
type samplerConfig struct {
	primaryDSN       string
	cores            float64
	replicaDSNs      []string
	requiredReplicas []string
	pgbouncerDSN     string
}

func samplerFromConfig(path string) (samplerConfig, error) {
	cfg, err := config.LoadWithoutSecrets(path)
	if err != nil {
		return samplerConfig{}, err
	}
	if err := refuseBlocks("signals", path, blockUses); err != nil {
		return samplerConfig{}, err
	}
	if err := secretSet(path, "the primary's dsn", cfg.PrimaryDSN); err != nil {
		return samplerConfig{}, err
	}
	sc := samplerConfig{primaryDSN: cfg.PrimaryDSN, cores: cfg.Cores, pgbouncerDSN: cfg.PgBouncerDSN}
	for _, name := range slices.Sorted(maps.Keys(cfg.ReplicaDSNs)) {
		dsn := cfg.ReplicaDSNs[name]
		if err := secretSet(path, fmt.Sprintf("replica %q's dsn", name), dsn); err != nil {
			return samplerConfig{}, err
		}
		sc.replicaDSNs = append(sc.replicaDSNs, dsn)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Replicas)) {
		if cfg.Replicas[name] == throttle.ReplicaRequired {
			sc.requiredReplicas = append(sc.requiredReplicas, name)
		}
	}
	return sc, nil
}

// fill sets what the flags (and their variables) left empty from sc. The
// PgBouncer's DSN, a secret, must be set when it is used.
func (sc samplerConfig) fill(path string, dsn *string, cores *float64, replicaDSNs, replicas *[]string, pgbouncerDSN *string) error {
	*dsn = firstNonEmpty(*dsn, sc.primaryDSN)
	if *cores == 0 {
		*cores = sc.cores
	}
	if len(*replicaDSNs) == 0 {
		*replicaDSNs = sc.replicaDSNs
	}
	if len(*replicas) == 0 {
		*replicas = sc.requiredReplicas
	}
	if *pgbouncerDSN == "" {
		if err := secretSet(path, "the pgbouncer's dsn", sc.pgbouncerDSN); err != nil {
			return err
		}
		*pgbouncerDSN = sc.pgbouncerDSN
	}
	return nil
}

// fromConfig reads --config's file for exec: every block that paces or
// protects the job (blockUses says which), for the values the flags and
// their variables leave out; given reports a flag given or set from its
// variable, which wins where both say something. The file's secrets that
// exec uses (its DSNs, Prometheus's credentials) must be set; the
// sidecar's own (its tokens, its notifiers') need not be.
func (o *execOptions) fromConfig(given func(flag string) bool) error {
	path := o.config
	f, err := config.LoadWithoutSecrets(path)
	if err != nil {
		return err
	}
	if err := refuseBlocks("exec", path, blockUses); err != nil {
		return err
	}
	var errs []error
	need := func(what, secret string) string {
		errs = append(errs, secretSet(path, what, secret))
		return secret
	}
	o.file = f
	if o.primaryDSN == "" {
		o.primaryDSN = need("the primary's dsn", f.PrimaryDSN)
	}
	// Left out, coordination_dsn is dsn, the sampling role: exec then
	// keeps to the job's DSN, in the same database.
	if f.CoordinationDSN != f.PrimaryDSN {
		o.coordinationDSN = need("the primary's coordination_dsn", f.CoordinationDSN)
	}
	if o.cores == 0 {
		o.cores = f.Cores
	}
	if len(o.replicaDSNs) == 0 {
		for _, name := range slices.Sorted(maps.Keys(f.ReplicaDSNs)) {
			o.replicaDSNs = append(o.replicaDSNs, need(fmt.Sprintf("replica %q's dsn", name), f.ReplicaDSNs[name]))
		}
	}
	if o.pgbouncerDSN == "" {
		o.pgbouncerDSN = need("the pgbouncer's dsn", f.PgBouncerDSN)
	}
	need("the prometheus block's bearer_token", f.Prometheus.BearerToken)
	need("the prometheus block's basic_password", f.Prometheus.BasicPassword)
	if err := errors.Join(errs...); err != nil {
		return err
	}

	// The controller block, for the flags not given.
	if !given("max-rate") && f.MaxBudget > 0 {
		o.budget = f.MaxBudget
	}
	if !given("quiet-period") && f.QuietPeriod > 0 {
		o.quiet = f.QuietPeriod
	}
	if !given("foreground-latency") && !given("no-foreground-latency") {
		o.noLatency = f.NoForegroundLatency
	}
	// The job's own block, named as --job.
	i := slices.IndexFunc(f.Jobs, func(j config.Job) bool { return j.Name == o.job })
	if i < 0 {
		return nil
	}
	j := f.Jobs[i]
	o.weight, o.minRate, o.jobSignals = j.Weight, j.MinRate, j.Signals
	if !given("max-rate") && j.MaxRate > 0 {
		o.maxRate = j.MaxRate
	}
	if !given("min-batch-size") && j.MinBatchSize > 0 {
		o.minBatch = j.MinBatchSize
	}
	if !given("max-batch-size") && j.MaxBatchSize > 0 {
		o.maxBatch = j.MaxBatchSize
	}
	if !given("target-batch-duration") && j.TargetBatchDuration > 0 {
		o.target = j.TargetBatchDuration
	}
	if !given("table") && len(j.Tables) > 0 {
		o.tables = slices.Clone(j.Tables)
	}
	if !given("batch-size") {
		// The first batch's default size, within the block's bounds.
		o.batch = max(o.minBatch, min(o.maxBatch, o.batch))
	}
	return nil
}
