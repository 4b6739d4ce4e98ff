package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/throttled/throttled/internal/textsafe"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/throttle/hold"
)

// console is where `resume --all` asks for its confirmation: the
// process's stdin, and whether it is a terminal.
type console struct {
	in       io.Reader
	terminal bool
}

// resumeOptions are the flags of `throttled resume`.
type resumeOptions struct {
	cf                             coordFlags
	id, job, prefix, scope, reason string
	every, yes, latched            bool
}

func (o *resumeOptions) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.id, "hold", "", "release the hold with this `ID` (from throttled holds)")
	fs.StringVar(&o.job, "job", "", "release the holds on exactly this job (scope job:NAME)")
	fs.StringVar(&o.prefix, "prefix", "", "release the holds on exactly this group (scope group:PREFIX)")
	fs.StringVar(&o.scope, "scope", "", "release the holds with exactly this scope: all, job:NAME or group:PREFIX")
	fs.BoolVar(&o.every, "all", false, "release every active hold of every scope, after a confirmation listing them")
	fs.BoolVar(&o.yes, "yes", false, "with --all: release without asking (required when stdin is not a terminal)")
	fs.BoolVar(&o.latched, "latched", false, "end the cluster's latched critical pause (the leader acts within a tick)")
	fs.StringVar(&o.reason, "reason", "", "why (audited)")
}

const resumeUsage = `Releases holds; jobs restart slowly. Exactly one of:
  --hold ID        that one hold (an ID from throttled holds)
  --job NAME       the holds on exactly job:NAME
  --prefix PREFIX  the holds on exactly group:PREFIX
  --scope SCOPE    the holds with exactly this scope: all, job:NAME or group:PREFIX
                   (--scope all releases the hold on all jobs alone)
  --all            every active hold of every scope, after a confirmation listing them;
                   --yes skips it, and is required when stdin is not a terminal
  --latched        end the cluster's latched critical pause instead`

func newResumeCmd(lf *logFlags) *cobra.Command {
	var o resumeOptions
	c := &cobra.Command{
		Use:   "resume (--hold ID | --job NAME | --prefix PREFIX | --scope SCOPE | --all [--yes] | --latched) [flags]",
		Short: "release holds (jobs restart slowly)",
		Long:  resumeUsage,
		Example: `  throttled resume --job purge_sessions
  throttled resume --latched --reason "load gone, checked"`,
	}
	coordCmd(lf, c, &o.cf, true, "print the holds released as a JSON array",
		func(ctx context.Context, cmd *cobra.Command, out, errOut io.Writer) int {
			return o.run(ctx, console{in: cmd.InOrStdin(), terminal: isatty.IsTerminal(os.Stdin.Fd()) && cmd.InOrStdin() == os.Stdin}, out, errOut)
		})
	o.register(c.Flags())
	return c
}

// run releases what o chose, asking on con before --all.
func (o *resumeOptions) run(ctx context.Context, con console, out, errOut io.Writer) int {
	sc, err := o.check(con)
	if err != nil {
		return fail(errOut, "resume", err)
	}
	if o.latched {
		return o.resumeLatched(ctx, out, errOut)
	}
	// The timeout bounds the calls, not a person's answer: the releases
	// after a confirmation get their own.
	cf := o.cf
	bctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	r, err := cf.backend(bctx, true)
	if err != nil {
		return fail(errOut, "resume", err)
	}
	defer r.close()
	if o.id != "" {
		h, err := r.release(bctx, o.id, o.reason)
		if err != nil {
			return fail(errOut, "resume", err)
		}
		printReleased(out, []hold.Hold{h}, cf.json)
		return exitOK
	}
	active, err := r.active(bctx)
	if err != nil {
		return fail(errOut, "resume", err)
	}
	var chosen []hold.Hold
	for _, h := range active {
		if o.every || h.Scope == sc {
			chosen = append(chosen, h)
		}
	}
	switch {
	case len(chosen) == 0 && o.every:
		if cf.json {
			printReleased(out, nil, true)
			return exitOK
		}
		fmt.Fprintln(out, "no active holds")
		return exitOK
	case len(chosen) == 0:
		return fail(errOut, "resume", fmt.Errorf("no active hold on exactly %s; see `throttled holds` (--all releases every hold of every scope)", sc))
	case o.every && !o.yes:
		ok, err := confirm(con.in, errOut, chosen)
		if err != nil {
			return fail(errOut, "resume", err)
		}
		if !ok {
			return fail(errOut, "resume", errors.New("not confirmed; nothing released"))
		}
	}
	return o.release(ctx, r, chosen, out, errOut)
}

// check refuses flags that do not make one request: unstorable text, no
// target or more than one, --latched beside a target, or --all with no
// way to confirm it. It returns the scope to release (the zero Scope for
// --hold, --all and --latched). Every error is a usage error.
func (o *resumeOptions) check(con console) (hold.Scope, error) {
	for _, f := range []struct{ flag, v string }{{"--reason", o.reason}, {"--actor", o.cf.actor}} {
		if err := hold.Storable(f.v); err != nil {
			return hold.Scope{}, usageError(fmt.Errorf("%s: %w", f.flag, err))
		}
	}
	chosen := 0
	for _, set := range []bool{o.id != "", o.job != "", o.prefix != "", o.scope != "", o.every} {
		if set {
			chosen++
		}
	}
	if o.latched {
		if chosen > 0 {
			return hold.Scope{}, usageError(errors.New("--latched ends the critical pause; release holds in another call"))
		}
		return hold.Scope{}, nil
	}
	if chosen != 1 {
		return hold.Scope{}, usageError(errors.New("give exactly one of --hold ID, --job, --prefix, --scope and --all (--all: every hold of every scope)"))
	}
	var sc hold.Scope
	var err error
	switch {
	case o.job != "":
		sc = hold.OneJob(o.job)
		err = sc.Validate()
	case o.prefix != "":
		sc = hold.Group(o.prefix)
		err = sc.Validate()
	case o.scope != "":
		sc, err = hold.ParseScope(o.scope)
	}
	if err != nil {
		return hold.Scope{}, usageError(err)
	}
	if o.every && !o.yes && !con.terminal {
		return hold.Scope{}, usageError(errors.New("--all releases every active hold of every scope: add --yes to confirm, as stdin is not a terminal to ask on " +
			"(--scope all releases the hold on all jobs alone)"))
	}
	return sc, nil
}

// resumeLatched asks the leader to end its latched critical pause.
func (o *resumeOptions) resumeLatched(ctx context.Context, out, errOut io.Writer) int {
	cf := o.cf
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	b, err := cf.backend(ctx, true)
	if err != nil {
		return fail(errOut, "resume", err)
	}
	defer b.close()
	if err := b.resumeLatched(ctx, o.reason); err != nil {
		return fail(errOut, "resume", err)
	}
	if cf.json {
		_ = json.NewEncoder(out).Encode(struct {
			Requested bool `json:"resume_requested"`
		}{true})
		return exitOK
	}
	fmt.Fprintln(out, "resume requested: the leader ends the latch within a tick; jobs restart once the signals are calm, slowly")
	return exitOK
}

// release releases exactly the holds listed (and confirmed): a hold made
// since is not released, and one that ended meanwhile is passed over. On
// a failure it prints what it released before and names how far it got.
func (o *resumeOptions) release(ctx context.Context, r holdsBackend, chosen []hold.Hold, out, errOut io.Writer) int {
	cf := o.cf
	rctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	var released []hold.Hold
	for _, h := range chosen {
		got, err := r.release(rctx, h.ID, o.reason)
		if errors.Is(err, hold.ErrUnknown) {
			if cf.json {
				fmt.Fprintf(errOut, "hold %s had already ended\n", textsafe.Line(h.ID))
			} else {
				fmt.Fprintf(out, "hold %s had already ended\n", textsafe.Line(h.ID))
			}
			continue
		}
		if err != nil {
			printReleased(out, released, cf.json)
			return fail(errOut, "resume", fmt.Errorf("release hold %s (%d of %d released): %w", h.ID, len(released), len(chosen), err))
		}
		released = append(released, got)
	}
	printReleased(out, released, cf.json)
	return exitOK
}

// confirm lists hs on w and asks whether to release them all; only "y" or
// "yes" confirms.
func confirm(in io.Reader, w io.Writer, hs []hold.Hold) (bool, error) {
	fmt.Fprintf(w, "%d active holds, of every scope:\n", len(hs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tSCOPE\tSOURCE\tACTOR\tREASON")
	for _, h := range hs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", textsafe.Line(h.ID), textsafe.Line(h.Scope.String()), textsafe.Line(string(h.Source)),
			textsafe.Line(h.Actor), textsafe.Line(h.Reason))
	}
	tw.Flush()
	fmt.Fprintf(w, "Release all %d? [y/N] ", len(hs))
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read the confirmation: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

func printReleased(out io.Writer, hs []hold.Hold, asJSON bool) {
	if asJSON {
		list := []api.Hold{}
		for _, h := range hs {
			list = append(list, sidecar.HoldJSON(h))
		}
		_ = json.NewEncoder(out).Encode(list)
		return
	}
	for _, h := range hs {
		fmt.Fprintf(out, "released hold %s on %s (made by %s: %s)\n", textsafe.Line(h.ID), textsafe.Line(h.Scope.String()), textsafe.Line(h.Actor), textsafe.Line(h.Reason))
	}
	if len(hs) > 0 {
		fmt.Fprintln(out, "jobs restart slowly: at a quarter of their rate before the pause")
	}
}
