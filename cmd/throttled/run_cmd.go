package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/page"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
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
		Signals:             signals.Config{Replicas: expected, Custom: cfg.Custom, PgBouncerDSN: cfg.PgBouncerDSN},
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
	// loadToRun bounded by the timeout: at start and on each reload.
	load := func(ctx context.Context) (*config.Config, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return loadToRun(ctx, path)
	}
	cfg, err := load(ctx)
	if err != nil {
		return err
	}
	// Pages: only the leader decides, so only the leader pages.
	var leading func() bool
	pager := page.New(page.Config{Notifiers: notifiers(cfg), Cluster: cfg.Cluster, Dashboard: cfg.Dashboard, Runbook: cfg.Runbook, Logger: log.Named("page"),
		Leading: func() bool { return leading != nil && leading() }})
	opts := clientOptions(cfg, log)
	var srv *sidecar.Server
	var srvReady atomic.Bool
	opts.OnEnforce = func(vs []holds.Violation) {
		if srvReady.Load() {
			byJob := map[string]int{}
			for _, v := range vs {
				byJob[string(v.Job)]++
			}
			srv.SetViolations(byJob)
		}
		jobs := map[string]string{}
		for _, v := range vs {
			jobs[string(v.Job)] = fmt.Sprintf("job %s kept working %s under a hold (pid %d)", v.Job, v.RunningFor.Round(time.Second), v.PID)
		}
		pager.Unhonoured(time.Now(), jobs)
	}
	opts.OnPrimaryChange = func(e holds.Entry) { pager.PrimaryChanged(e.At, e.Reason) }
	octx, cancel := context.WithTimeout(ctx, timeout)
	client, err := throttled.Open(octx, opts)
	cancel()
	if err != nil {
		return err
	}
	defer client.Close() // last: releases leadership and the worker rows
	if err := setHoldCap(ctx, client.DurableHolds(), cfg, path, log); err != nil {
		return err
	}
	leading = client.Leader
	slog := log.Named("sidecar")
	pctx, stopPager := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPager()
	decisions := client.Decisions()
	go pager.Run(pctx)
	audit := &windowAudit{store: client.DurableHolds(), leading: client.Leader, log: slog}
	go func() {
		for d := range decisions {
			pager.Decision(d)
			audit.decision(pctx, d)
		}
	}()

	notify := func(state string) {
		if err := sdNotify(state); err != nil {
			slog.Warn("cannot tell systemd", "error", err)
		}
	}
	var reloadMu sync.Mutex
	// reload loads and validates the file, offline and live, and applies
	// it only whole: a refused file changes nothing.
	reload := func(ctx context.Context) (*config.Config, error) {
		reloadMu.Lock()
		defer reloadMu.Unlock()
		notify(reloading())
		defer notify("READY=1\nSTATUS=serving")
		next, err := load(ctx)
		if err == nil {
			err = restartOnly(cfg, next)
		}
		if err == nil { // holds.max_ttl is unchanged (restartOnly): this repairs a cap changed meanwhile
			err = setHoldCap(ctx, client.DurableHolds(), next, path, slog)
		}
		// The controller's configuration was validated with the file
		// (config.Load runs the controller's own checks); the jobs are
		// applied (or undone) next, and only then the controller and the
		// pager change, so a refusal changes nothing.
		if err == nil {
			err = srv.Apply(next)
		}
		if err == nil {
			err = client.Reconfigure(next.ControllerConfig())
		}
		if err == nil {
			pager.SetNotifiers(notifiers(next), next.Dashboard, next.Runbook)
		}
		entry := holds.Entry{Event: holds.EventReload, Actor: "throttled", Source: string(hold.SourceAuto)}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		srv.ReloadResult(err == nil)
		if err != nil {
			slog.Error("configuration refused; the last good one stays", "file", path, "error", err, "version", cfg.Version)
			entry.Reason, entry.Detail = "refused: "+err.Error(), map[string]any{"kept": cfg.Version}
			_ = client.DurableHolds().Audit(actx, entry)
			return nil, err
		}
		slog.Info("configuration reloaded", "file", path, "version", next.Version)
		entry.Reason, entry.Detail = "applied version "+next.Version, map[string]any{"previous": cfg.Version}
		_ = client.DurableHolds().Audit(actx, entry)
		cfg = next
		return next, nil
	}
	if srv, err = sidecar.New(client, cfg, reload, slog); err != nil {
		return err
	}
	srv.SetPager(pager)
	if cfg.Grafana.URL != "" {
		// Holds as regions in Grafana's own annotations, pushed by the
		// leader; the URL and token change only on restart.
		ann := sidecar.NewAnnotations(cfg.Grafana.URL, cfg.Grafana.ServiceAccountToken, cfg.Cluster,
			client.HoldWatcher().Active, client.Leader, log.Named("annotations"))
		srv.SetAnnotations(ann)
		go ann.Run(ctx, time.Second)
	}
	srvReady.Store(true)
	// What the loop below needs, read before any reload can run; after
	// this, cfg is touched only under reloadMu.
	listen, tlsCert, tlsKey, version := cfg.Listen, cfg.TLSCert, cfg.TLSKey, cfg.Version
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	httpSrv := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 15 * time.Second, IdleTimeout: time.Minute, ErrorLog: slog.StandardLogger(&hclog.StandardLoggerOptions{})}
	errc := make(chan error, 1)
	go func() {
		if tlsCert != "" {
			errc <- httpSrv.ServeTLS(ln, tlsCert, tlsKey)
		} else {
			errc <- httpSrv.Serve(ln)
		}
	}()
	fmt.Fprintf(out, "throttled: serving on %s (config %s, version %s)\n", ln.Addr(), path, version)
	notify(fmt.Sprintf("READY=1\nSTATUS=serving on %s (config version %s)", ln.Addr(), version))
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			_, _ = reload(ctx)
		case err := <-errc:
			return err
		case <-ctx.Done():
			notify("STOPPING=1")
			// In order: stop taking requests and finish those in flight,
			// then (deferred) release leadership.
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := httpSrv.Shutdown(sctx)
			cancel()
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			fmt.Fprintln(out, "throttled: stopped")
			return nil
		}
	}
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
