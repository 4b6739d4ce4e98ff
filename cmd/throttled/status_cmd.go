package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/coord/store"
	"github.com/throttled/throttled/internal/textsafe"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

// newStatusCmd shows the cluster's pacing: through a sidecar's API, or
// from the leader's last publication and the workers' leases in the
// database.
func newStatusCmd(lf *logFlags) *cobra.Command {
	var cf coordFlags
	c := &cobra.Command{
		Use:     "status",
		Short:   "the cluster's leader, mode, budget and workers",
		Long:    "The cluster's leader, mode, budget and every worker, with each job's state and reason code: from the database, or (--addr) from a sidecar's API, which also says where each of its jobs' time went (at full rate, limited by which signal, slow start, held, ...).",
		Example: "  throttled status\n  throttled status --addr http://127.0.0.1:18087 --json",
	}
	return coordCmd(lf, c, &cf, false, "print JSON", func(ctx context.Context, _ *cobra.Command, out, errOut io.Writer) int {
		ctx, cancel := context.WithTimeout(ctx, cf.timeout)
		defer cancel()
		return printStatus(ctx, cf, out, errOut)
	})
}

func printStatus(ctx context.Context, cf coordFlags, out, errOut io.Writer) int {
	if cf.addr != "" {
		raw, err := apiCall(ctx, cf.addr, cf.token, "GET", "/v1/status", nil)
		if err != nil {
			return fail(errOut, "status", err)
		}
		if cf.json {
			out.Write(raw)
			return exitOK
		}
		var st api.Status
		if err := json.Unmarshal(raw, &st); err != nil {
			return fail(errOut, "status", fmt.Errorf("unreadable answer from %s: %w", cf.addr, err))
		}
		printSidecarStatus(out, st)
		return exitOK
	}
	db, err := openReadDB(ctx, cf.dsn, holds.Config{})
	if err != nil {
		return fail(errOut, "status", err)
	}
	pool := db.Pool()
	defer pool.Close()
	leader, _, workers, err := store.New(pool).Status(ctx, 10*time.Second)
	if err != nil {
		return fail(errOut, "status", err)
	}
	// The JSON keeps the shape it always had: the leader's fields, with
	// Binding as text, then the workers; BindingSignal and BindingLabels
	// are the binding for programs, which never parse Binding.
	binding := status.Binding{Signal: signals.Name(leader.Binding.Signal), Labels: leader.Binding.Labels}
	st := struct {
		Leader, Mode  string
		Binding       string
		BindingSignal string
		BindingLabels map[string]string `json:",omitempty"`
		Reason        string
		Budget        float64
		PublishedAt   time.Time
		Workers       []store.WorkerState
	}{leader.Leader, leader.Mode, binding.String(), string(binding.Signal), leader.Binding.Labels, leader.Reason, leader.Budget, leader.PublishedAt, workers}
	if cf.json {
		_ = json.NewEncoder(out).Encode(st)
		return exitOK
	}
	if leader.Leader == "" {
		fmt.Fprintln(out, "no leader has published yet")
	} else {
		fmt.Fprintf(out, "leader %s, %s ago: mode %s, budget %.2f batches/s, binding %s\nreason: %s\n",
			textsafe.Line(leader.Leader), time.Since(leader.PublishedAt).Round(time.Millisecond), textsafe.Line(leader.Mode), leader.Budget,
			textsafe.Line(firstNonEmpty(binding.String(), "-")), textsafe.Line(leader.Reason))
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tJOB\tSTATE\tCODE\tRATE\tLEASE\tREASON")
	for _, w := range workers {
		lease := "valid"
		if !w.LeaseValid {
			lease = "expired"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\t%s\t%s\n", textsafe.Line(w.ID), textsafe.Line(w.Job), textsafe.Line(w.State), textsafe.Line(firstNonEmpty(w.Code, "-")),
			w.Rate, lease, textsafe.Line(w.Reason))
	}
	tw.Flush()
	// Where each worker's time went, as its process counted it (its
	// heartbeat writes it): the line a person reads to see why a job
	// crawls.
	for _, w := range workers {
		if len(w.LimitedSeconds) == 0 {
			continue
		}
		secs := map[status.Why]float64{}
		for why, s := range w.LimitedSeconds {
			secs[status.Why(why)] = s
		}
		fmt.Fprintf(out, "%s (%s): %s\n", textsafe.Line(w.ID), textsafe.Line(w.Job), textsafe.Line(status.WhySlow(secs)))
	}
	return exitOK
}

// printSidecarStatus prints a sidecar's status: its leadership and, on the
// leader, its decision; then each configured job with where its time went
// in that process (api.Job.WhySlow).
func printSidecarStatus(out io.Writer, st api.Status) {
	if st.Decision == nil {
		fmt.Fprintf(out, "leader: false (this process does not lead; ask the leader for its decision)\nconfig version: %s\n", textsafe.Line(st.ConfigVersion))
	} else {
		fmt.Fprintf(out, "leader: true  mode: %s  budget: %.3g batches/s  binding: %s\nreason: %s\nconfig version: %s\n",
			textsafe.Line(st.Mode), st.Budget, textsafe.Line(firstNonEmpty(st.Binding, "-")), textsafe.Line(st.Reason), textsafe.Line(st.ConfigVersion))
	}
	if len(st.Jobs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tCODE\tRATE\tWHERE THE TIME WENT")
	for _, j := range st.Jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\n", textsafe.Line(j.Job), textsafe.Line(j.State), textsafe.Line(firstNonEmpty(j.Code, "-")), j.Rate,
			textsafe.Line(firstNonEmpty(j.WhySlow, "-")))
	}
	tw.Flush()
}
