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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/page"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/throttle/hold"
)

// daemon is one `throttled run`: the client that paces the jobs, the
// pager, the HTTP API, and the configuration they run on, which a reload
// replaces whole or not at all. serve starts them in order: load, open,
// page, startAPI, listen.
type daemon struct {
	path      string
	timeout   time.Duration // bounds loading and connecting, at start and on each reload
	log, slog hclog.Logger  // slog: the sidecar's
	client    *throttled.Client
	pager     *page.Pager
	srv       *sidecar.Server
	srvReady  atomic.Bool
	leading   atomic.Value // func() bool, the client's Leader once it is open
	reloadMu  sync.Mutex
	cfg       *config.Config // after startAPI, touched only under reloadMu
}

// load reads and checks the file, offline and against the cluster,
// within the timeout.
func (d *daemon) load(ctx context.Context) (*config.Config, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	return loadToRun(ctx, d.path)
}

// isLeading reports whether this process leads: only the leader decides,
// so only the leader pages.
func (d *daemon) isLeading() bool {
	f, _ := d.leading.Load().(func() bool)
	return f != nil && f()
}

// open makes the pager and opens the client, whose enforcer reports to
// both: a job that kept working under a hold is counted by the API and
// paged.
func (d *daemon) open(ctx context.Context) error {
	cfg := d.cfg
	d.pager = page.New(page.Config{Notifiers: notifiers(cfg), Cluster: cfg.Cluster, Dashboard: cfg.Dashboard, Runbook: cfg.Runbook, Logger: d.log.Named("page"),
		Leading: d.isLeading})
	opts := clientOptions(cfg, d.log)
	opts.OnEnforce = func(vs []holds.Violation) {
		if d.srvReady.Load() {
			byJob := map[string]int{}
			for _, v := range vs {
				byJob[string(v.Job)]++
			}
			d.srv.SetViolations(byJob)
		}
		jobs := map[string]string{}
		for _, v := range vs {
			jobs[string(v.Job)] = fmt.Sprintf("job %s kept working %s under a hold (pid %d)", v.Job, v.RunningFor.Round(time.Second), v.PID)
		}
		d.pager.Unhonoured(time.Now(), jobs)
	}
	opts.OnPrimaryChange = func(e holds.Entry) { d.pager.PrimaryChanged(e.At, e.Reason) }
	opts.Work = d.work
	octx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	client, err := throttled.Open(octx, opts)
	if err != nil {
		return err
	}
	d.client = client
	return nil
}

// work is when the sidecar's remote workers were last at work: now while
// a token is out, and now until the API is up (the tokens a restart takes
// back are out before it can say).
func (d *daemon) work() time.Time {
	if !d.srvReady.Load() {
		return time.Now()
	}
	return d.srv.WorkedAt(time.Now())
}

// page runs the pager and feeds it, and the windows' audit, every
// decision; the function it returns stops the pager.
func (d *daemon) page(ctx context.Context) (stop func()) {
	pctx, stopPager := context.WithCancel(context.WithoutCancel(ctx))
	decisions := d.client.Decisions()
	go d.pager.Run(pctx)
	audit := &windowAudit{audit: d.client.DurableHolds().Audit(), leading: d.client.Leader, log: d.slog}
	go func() {
		for dec := range decisions {
			d.pager.Decision(page.Decision{At: dec.At, Mode: dec.Mode, Binding: dec.Binding, Reason: dec.Reason, Events: dec.Events})
			audit.decision(pctx, dec)
		}
	}()
	return stopPager
}

// startAPI makes the HTTP API's server, with reload behind POST
// /v1/reload, and Grafana's annotations when configured.
func (d *daemon) startAPI(ctx context.Context) error {
	srv, err := sidecar.New(d.client, d.cfg, d.reload, d.slog)
	if err != nil {
		return err
	}
	d.srv = srv
	srv.SetPager(d.pager)
	if d.cfg.Grafana.URL != "" {
		// Holds as regions in Grafana's own annotations, pushed by the
		// leader; the URL and token change only on restart.
		ann := sidecar.NewAnnotations(d.cfg.Grafana.URL, d.cfg.Grafana.ServiceAccountToken, d.cfg.Cluster,
			d.client.HoldWatcher().Active, d.client.Leader, d.log.Named("annotations"))
		srv.SetAnnotations(ann)
		go ann.Run(ctx, time.Second)
	}
	d.srvReady.Store(true)
	return nil
}

// notify tells systemd state, when it runs throttled.
func (d *daemon) notify(state string) {
	if err := sdNotify(state); err != nil {
		d.slog.Warn("cannot tell systemd", "error", err)
	}
}

// reload loads and validates the file, offline and live, and applies it
// only whole: a refused file changes nothing.
func (d *daemon) reload(ctx context.Context) (*config.Config, error) {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	d.notify(reloading())
	defer d.notify("READY=1\nSTATUS=serving")
	cfg := d.cfg
	next, err := d.load(ctx)
	if err == nil {
		err = restartOnly(cfg, next)
	}
	if err == nil { // holds.max_ttl is unchanged (restartOnly): this repairs a cap changed meanwhile
		err = setHoldCap(ctx, d.client.DurableHolds(), next, d.path, d.slog)
	}
	// The controller's configuration was validated with the file
	// (config.Load runs the controller's own checks); the jobs are
	// applied (or undone) next, and only then the controller and the
	// pager change, so a refusal changes nothing.
	if err == nil {
		err = d.srv.Apply(next)
	}
	if err == nil {
		err = d.client.Reconfigure(next.ControllerConfig())
	}
	if err == nil {
		d.pager.SetNotifiers(notifiers(next), next.Dashboard, next.Runbook)
	}
	entry := holds.Entry{Event: holds.EventReload, Actor: "throttled", Source: string(hold.SourceAuto)}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	d.srv.ReloadResult(err == nil)
	if err != nil {
		d.slog.Error("configuration refused; the last good one stays", "file", d.path, "error", err, "version", cfg.Version)
		entry.Reason, entry.Detail = "refused: "+err.Error(), map[string]any{"kept": cfg.Version}
		_ = d.client.DurableHolds().Audit().Append(actx, entry)
		return nil, err
	}
	d.slog.Info("configuration reloaded", "file", d.path, "version", next.Version)
	entry.Reason, entry.Detail = "applied version "+next.Version, map[string]any{"previous": cfg.Version}
	_ = d.client.DurableHolds().Audit().Append(actx, entry)
	d.cfg = next
	return next, nil
}

// listen serves the API until ctx ends or the listener fails, reloading
// on SIGHUP. On ctx's end it stops taking requests and finishes those in
// flight; leadership is released after, by serve.
func (d *daemon) listen(ctx context.Context, out io.Writer) error {
	// What the loop below needs, read before any reload can run; after
	// this, cfg is touched only under reloadMu.
	listen, tlsCert, tlsKey, version := d.cfg.Listen, d.cfg.TLSCert, d.cfg.TLSKey, d.cfg.Version
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	httpSrv := &http.Server{Handler: d.srv.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 15 * time.Second, IdleTimeout: time.Minute, ErrorLog: d.slog.StandardLogger(&hclog.StandardLoggerOptions{})}
	errc := make(chan error, 1)
	go func() {
		if tlsCert != "" {
			errc <- httpSrv.ServeTLS(ln, tlsCert, tlsKey)
		} else {
			errc <- httpSrv.Serve(ln)
		}
	}()
	fmt.Fprintf(out, "throttled: serving on %s (config %s, version %s)\n", ln.Addr(), d.path, version)
	d.notify(fmt.Sprintf("READY=1\nSTATUS=serving on %s (config version %s)", ln.Addr(), version))
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			_, _ = d.reload(ctx)
		case err := <-errc:
			return err
		case <-ctx.Done():
			d.notify("STOPPING=1")
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
