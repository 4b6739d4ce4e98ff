package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/page"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

func newRunCmd(lf *logFlags) *cobra.Command {
	var path string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "run --config FILE [flags]",
		Short: "the sidecar: pace jobs with the cluster's leader and serve the HTTP API",
		Long: `The sidecar: samples the primary (while it leads the cluster), paces the configured jobs and the remote
workers, and serves the HTTP API. The file is checked offline and against the cluster first; SIGHUP or
POST /v1/reload reloads it, whole or not at all.`,
		Example: "  throttled run --config /etc/throttled/throttled.hcl --log-json\n  THROTTLED_CONFIG=/etc/throttled/throttled.hcl throttled run",
		Args:    cobra.NoArgs,
		Annotations: map[string]string{
			annotationEnv:  "(the file's env() calls)  the variables they name\nNOTIFY_SOCKET  systemd's, for READY, RELOADING and STOPPING",
			annotationExit: "Exit codes: 0 stopped by SIGINT or SIGTERM, 1 runtime failure, 2 usage, 4 invalid configuration.",
		},
		RunE: action(func(cmd *cobra.Command) int {
			errOut := cmd.ErrOrStderr()
			if _, err := applyEnv(cmd.Flags(), os.Getenv); err != nil {
				return fail(errOut, "run", err)
			}
			if path == "" {
				return fail(errOut, "run", usageError(errors.New("--config (or THROTTLED_CONFIG) is required")))
			}
			if timeout <= 0 {
				return fail(errOut, "run", usageError(fmt.Errorf("--timeout must be positive, got %s", timeout)))
			}
			log, err := lf.logger(errOut)
			if err != nil {
				return fail(errOut, "run", err)
			}
			if err := serve(cmd.Context(), path, timeout, log, cmd.OutOrStdout()); err != nil {
				return fail(errOut, "run", err)
			}
			return exitOK
		}),
	}
	configFlag(cmd.Flags(), &path)
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "bound on checking the file against the cluster and connecting, at start and on each reload")
	return cmd
}

// configFlag registers --config, the configuration file, read from
// THROTTLED_CONFIG when not given.
func configFlag(fs *pflag.FlagSet, path *string) {
	fs.StringVar(path, "config", "", "the configuration file (required)")
	withEnv(fs, "config", "THROTTLED_CONFIG")
}

// clientOptions is what a configuration asks of the throttled client.
func clientOptions(cfg *config.Config, log hclog.Logger) throttled.Options {
	var replicaDSNs, expected []string
	for _, dsn := range cfg.ReplicaDSNs {
		replicaDSNs = append(replicaDSNs, dsn)
	}
	for name, p := range cfg.Replicas {
		if p != throttle.ReplicaIgnored {
			expected = append(expected, name)
		}
	}
	return throttled.Options{
		PrimaryDSN: cfg.PrimaryDSN, ReplicaDSNs: replicaDSNs, Cores: cfg.Cores,
		Signals:             signals.Config{Replicas: expected, Custom: cfg.Custom, PgBouncerDSN: cfg.PgBouncerDSN, Prometheus: cfg.Prometheus.PrometheusConfig},
		Controller:          cfg.ControllerConfig(),
		NoForegroundLatency: cfg.NoForegroundLatency,
		CoordinationDSN:     cfg.CoordinationDSN,
		Coordinate:          true,
		Holds:               holds.Config{TTL: cfg.HoldTTL},
		Enforce:             &holds.EnforcerConfig{},
		Logger:              log,
	}
}

func serve(ctx context.Context, path string, timeout time.Duration, log hclog.Logger, out io.Writer) error {
	d := &daemon{path: path, timeout: timeout, log: log, slog: log.Named("sidecar")}
	cfg, err := d.load(ctx)
	if err != nil {
		return err
	}
	d.cfg = cfg
	for _, w := range cfg.LiveWarnings {
		log.Warn("starting with a signal unread", "warning", w)
	}
	if err := d.open(ctx); err != nil {
		return err
	}
	defer d.client.Close() // last: releases leadership and the worker rows
	if err := setHoldCap(ctx, d.client.DurableHolds(), cfg, path, log); err != nil {
		return err
	}
	d.leading.Store(d.client.Leader)
	stopPaging := d.page(ctx)
	defer stopPaging()
	if err := d.startAPI(ctx); err != nil {
		return err
	}
	// The sidecar's claim on its owner name (its listen id, or its host
	// and socket), under which its remote workers' tokens are kept: held
	// while it serves, given up once the API has stopped, before the
	// client closes.
	claimCtx, stopClaim := context.WithCancel(context.WithoutCancel(ctx))
	claimed := make(chan struct{})
	go func() {
		defer close(claimed)
		_ = d.srv.Run(claimCtx)
	}()
	defer func() { stopClaim(); <-claimed }()
	return d.listen(ctx, out)
}

// notifiers builds the configured paging destinations.
func notifiers(cfg *config.Config) []page.Notifier {
	var out []page.Notifier
	for _, n := range cfg.Notifiers {
		// The configuration admits only page.Kinds.
		if nf, err := page.ForKind(n.Kind, n.URL, n.Secret); err == nil {
			out = append(out, nf)
		}
	}
	return out
}

// restartOnly refuses a reload that changes what takes effect only on
// restart (config.RestartOnly), rather than reporting it applied while it
// is not.
func restartOnly(cur, next *config.Config) error {
	if changed := config.RestartOnly(cur, next); len(changed) > 0 {
		return fmt.Errorf("%s change only on restart; restart throttled to apply them", strings.Join(changed, ", "))
	}
	return nil
}
