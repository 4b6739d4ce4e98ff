package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/throttled/throttled/internal/textsafe"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/throttle/hold"
)

// scopeFlags selects a scope: --job, --prefix or --all, exactly one.
type scopeFlags struct {
	job, prefix string
	all         bool
}

func (s *scopeFlags) register(fs *pflag.FlagSet, verb string) {
	fs.StringVar(&s.job, "job", "", verb+" one job")
	fs.StringVar(&s.prefix, "prefix", "", verb+" every job whose name starts with this")
	fs.BoolVar(&s.all, "all", false, verb+" every job")
}

func (s *scopeFlags) scope() (hold.Scope, error) {
	n := 0
	var sc hold.Scope
	if s.job != "" {
		n, sc = n+1, hold.OneJob(s.job)
	}
	if s.prefix != "" {
		n, sc = n+1, hold.Group(s.prefix)
	}
	if s.all {
		n, sc = n+1, hold.AllJobs()
	}
	if n != 1 {
		return sc, errors.New("give exactly one of --job, --prefix and --all")
	}
	if err := sc.Validate(); err != nil {
		return sc, err
	}
	return sc, nil
}

// newPlaceHoldCmd is pause (a hold that stops its jobs), throttle (one
// that scales them, --ratio) and exempt (one that lets them ignore a
// signal, --signal): the same flags, the same checks, one audit line.
func newPlaceHoldCmd(lf *logFlags, name string) *cobra.Command {
	var cf coordFlags
	var sf scopeFlags
	var ttl time.Duration
	var reason, signal string
	var ratio float64
	c := &cobra.Command{
		Use:   name + " (--job NAME | --prefix PREFIX | --all) --reason WHY [flags]",
		Short: "hold one job, a group or all jobs, in every process, until it expires or is released",
		Long: `Places a hold: the jobs in its scope stop, in every process, including ones started later, until it
expires or is released (throttled resume). Every hold expires; its TTL is at most the cluster's cap
(holds.max_ttl of throttled run), and without --ttl the cluster's default (holds.default_ttl). Audited.`,
		Example: `  throttled pause --job purge_sessions --ttl 30m --reason "replica rebuild"
  throttled pause --addr http://127.0.0.1:18087 --all --reason "incident 4211" --json`,
	}
	if name == "throttle" {
		c.Short = "a live override: run one job, a group or all jobs at a share of their rate (--ratio 0.3) until it expires or is released"
		c.Long = `Places a live override: a hold that runs the jobs in its scope at --ratio of their rate instead of
stopping them, until it expires or is released (throttled resume). Audited; a running exec follows it
at its next heartbeat.`
		c.Example = `  throttled throttle --job purge_sessions --ratio 0.3 --ttl 2h --reason "deploy"`
		c.Use = name + " (--job NAME | --prefix PREFIX | --all) --ratio R --reason WHY [flags]"
	}
	if name == "exempt" {
		c.Short = "exempt one job, a group or all jobs from one signal until it expires or is released; pages if they run while critical"
		c.Long = `Places an exemption: a hold that lets the jobs in its scope ignore one signal (a rule's name, such as
replica_lag_seconds) until it expires or is released (throttled resume). A job rule on that signal no
longer gates them, and a critical or stale pause that only that signal causes lets them go on at the
rate they had, without growing; running while critical pages (ThrottledExemptWhileCritical). Every
other signal still binds them. Audited; a running exec follows it at its next heartbeat.`
		c.Example = `  throttled exempt --job purge_sessions --signal replica_lag_seconds --ttl 1h --reason "replica1 is being rebuilt"`
		c.Use = name + " (--job NAME | --prefix PREFIX | --all) --signal NAME --reason WHY [flags]"
	}
	coordCmd(lf, c, &cf, true, "print the hold placed as one JSON object, as GET /v1/holds lists it",
		func(ctx context.Context, cmd *cobra.Command, out, errOut io.Writer) int {
			sc, err := sf.scope()
			var errs []error
			if err != nil {
				errs = append(errs, err)
			}
			if strings.TrimSpace(reason) == "" {
				errs = append(errs, errors.New("--reason is required"))
			}
			// Without --ttl the request carries none, and the cluster's
			// default applies (holds.default_ttl of throttled run), as
			// the cluster's cap does: one policy, hold.TTLPolicy.
			switch {
			case !cmd.Flags().Changed("ttl"):
			case ttl <= 0:
				errs = append(errs, fmt.Errorf("--ttl must be positive, got %s", ttl))
			case ttl < hold.MinTTL:
				errs = append(errs, fmt.Errorf("--ttl %s is under the shortest hold, %s", ttl, hold.MinTTL))
			}
			if name == "throttle" && !(ratio >= hold.MinRatio && ratio <= 1) {
				errs = append(errs, fmt.Errorf("--ratio must be from %v (a thousandth of the jobs' rate) to 1, got %v (to stop the jobs, throttled pause)", hold.MinRatio, ratio))
			}
			// One printable line each: a newline or an escape in either
			// would forge a row of throttled holds and of the audit log.
			for _, f := range []struct{ flag, v string }{{"--reason", reason}, {"--actor", cf.actor}} {
				if err := hold.Storable(f.v); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", f.flag, err))
				}
			}
			if name == "exempt" && signal == "" {
				errs = append(errs, errors.New("--signal is required: the signal the jobs may ignore, such as replica_lag_seconds"))
			}
			if len(errs) > 0 {
				return fail(errOut, name, usageError(errors.Join(errs...)))
			}
			ctx, cancel := context.WithTimeout(ctx, cf.timeout)
			defer cancel()
			b, err := cf.backend(ctx, true)
			if err != nil {
				return fail(errOut, name, retryable(err))
			}
			defer b.close()
			h, warnings, err := b.add(ctx, hold.Request{Scope: sc, TTL: ttl, Reason: reason, Ratio: ratio, Exempt: signal})
			if errors.Is(err, hold.ErrInvalid) {
				return fail(errOut, name, usageError(err))
			}
			if err != nil {
				return fail(errOut, name, retryable(err))
			}
			for _, w := range warnings {
				fmt.Fprintf(errOut, "throttled %s: warning: %s\n", name, textsafe.Line(w))
			}
			if cf.json {
				_ = json.NewEncoder(out).Encode(sidecar.HoldJSON(h))
				return exitOK
			}
			what := ""
			switch {
			case h.Exempt != "":
				what = " exempt from " + h.Exempt
			case !h.Pauses():
				what = fmt.Sprintf(" at %.0f%%", 100*h.Ratio)
			}
			fmt.Fprintf(out, "hold %s on %s%s by %s until %s: %s\n", h.ID, textsafe.Line(h.Scope.String()), what, textsafe.Line(h.Actor),
				h.Expires.UTC().Format(time.RFC3339), textsafe.Line(h.Reason))
			return exitOK
		})
	fs := c.Flags()
	sf.register(fs, name)
	fs.DurationVar(&ttl, "ttl", 0, "how long the hold lasts, at most the cluster's cap (holds.max_ttl of throttled run, 24h by default); every hold expires. Unset: the cluster's default (holds.default_ttl of throttled run, 1h by default)")
	fs.StringVar(&reason, "reason", "", "why (required; shown to everyone and audited)")
	if name == "throttle" {
		fs.Float64Var(&ratio, "ratio", 0, "the share of their rate the jobs run at, above 0 and at most 1, such as 0.3 (required; throttled pause stops them)")
	}
	if name == "exempt" {
		fs.StringVar(&signal, "signal", "", "the signal the jobs ignore: a rule's name, such as replica_lag_seconds or vacuum_running (required)")
	}
	return c
}

func newHoldsCmd(lf *logFlags) *cobra.Command {
	var cf coordFlags
	c := &cobra.Command{
		Use:     "holds",
		Short:   "list the active holds",
		Long:    "Lists the active holds: scope, what each does (pause or a ratio), source, actor, time left and reason.",
		Example: "  throttled holds\n  throttled holds --addr http://127.0.0.1:18087 --json",
	}
	return coordCmd(lf, c, &cf, false, "print a JSON array", func(ctx context.Context, _ *cobra.Command, out, errOut io.Writer) int {
		ctx, cancel := context.WithTimeout(ctx, cf.timeout)
		defer cancel()
		b, err := cf.backend(ctx, false)
		if err != nil {
			return fail(errOut, "holds", err)
		}
		defer b.close()
		active, err := b.active(ctx)
		if err != nil {
			return fail(errOut, "holds", err)
		}
		if cf.json {
			list := []api.Hold{}
			for _, h := range active {
				list = append(list, sidecar.HoldJSON(h))
			}
			if err := json.NewEncoder(out).Encode(list); err != nil {
				return fail(errOut, "holds", err)
			}
			return exitOK
		}
		if len(active) == 0 {
			fmt.Fprintln(out, "no active holds")
			return exitOK
		}
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSCOPE\tDOES\tSOURCE\tACTOR\tEXPIRES IN\tREASON")
		for _, h := range active {
			does := "pause"
			switch {
			case h.Exempt != "":
				does = "exempt from " + textsafe.Line(h.Exempt)
			case !h.Pauses():
				does = fmt.Sprintf("%.0f%%", 100*h.Ratio)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", textsafe.Line(h.ID), textsafe.Line(h.Scope.String()), does, textsafe.Line(string(h.Source)),
				textsafe.Line(h.Actor), time.Until(h.Expires).Round(time.Second), textsafe.Line(h.Reason))
		}
		tw.Flush()
		return exitOK
	})
}

func newAuditCmd(lf *logFlags) *cobra.Command {
	var cf coordFlags
	var since time.Duration
	c := &cobra.Command{
		Use:     "audit",
		Short:   "read the audit log of holds, mode changes and pauses not honoured",
		Long:    "The audit log: holds, releases, resumes, mode changes, settings, windows and pauses not honoured, with who and why.",
		Example: "  throttled audit --since 24h\n  throttled audit --since 1h --json",
	}
	coordCmd(lf, c, &cf, false, "print one JSON object per line", func(ctx context.Context, _ *cobra.Command, out, errOut io.Writer) int {
		if since <= 0 {
			return fail(errOut, "audit", usageError(fmt.Errorf("--since must be positive, got %s", since)))
		}
		ctx, cancel := context.WithTimeout(ctx, cf.timeout)
		defer cancel()
		b, err := cf.backend(ctx, false)
		if err != nil {
			return fail(errOut, "audit", err)
		}
		defer b.close()
		entries, err := b.audit(ctx, since)
		if err != nil {
			return fail(errOut, "audit", err)
		}
		if cf.json {
			enc := json.NewEncoder(out)
			for _, e := range entries {
				if err := enc.Encode(e); err != nil {
					return fail(errOut, "audit", err)
				}
			}
			return exitOK
		}
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tEVENT\tHOLD\tACTOR\tSOURCE\tREASON")
		for _, e := range entries {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), textsafe.Line(e.Event), textsafe.Line(firstNonEmpty(e.HoldID, "-")),
				textsafe.Line(e.Actor), textsafe.Line(e.Source), textsafe.Line(e.Reason))
		}
		tw.Flush()
		return exitOK
	})
	c.Flags().DurationVar(&since, "since", 24*time.Hour, "how far back")
	return c
}
