// Command throttled paces background jobs against a PostgreSQL primary's
// health. See `throttled help`.
package main

import (
	// The IANA time zone database, for run windows in named zones on a
	// machine (or an image FROM scratch) without /usr/share/zoneinfo.
	_ "time/tzdata"

	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled/config"
)

// Exit codes.
const (
	exitOK     = 0
	exitError  = 1 // a runtime failure: unreachable server, missing grant
	exitUsage  = 2 // bad flags or arguments
	exitUnsafe = 3 // `signals` once: a signal failed or is stale
	exitConfig = 4 // an invalid configuration file
)

// errUsage marks errors that are the caller's, answered with exit code 2.
var errUsage = errors.New("invalid usage")

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, out, errOut io.Writer) int
}

func commands() []command {
	return []command{
		{"run", "the sidecar: pace jobs with the cluster's leader and serve the HTTP API", runRun},
		{"signals", "sample the primary's and replicas' health once, or --watch", runSignals},
		{"demo", "run the signals live against a throwaway primary and replica", runDemo},
		{"exec", "run an ad-hoc batch statement under the throttle until it affects no row", runExec},
		{"migrate", "create or update throttled's tables (schema throttled)", runMigrate},
		{"pause", "hold one job, a group or all jobs, in every process, until it expires or is released", runPause},
		{"throttle", "a live override: run one job, a group or all jobs at a share of their rate (--ratio 0.3) until it expires or is released", runThrottle},
		{"resume", "release holds (jobs restart slowly)", runResume},
		{"holds", "list the active holds", runHolds},
		{"status", "the cluster's leader, mode, budget and workers", runStatus},
		{"audit", "read the audit log of holds, mode changes and pauses not honoured", runAudit},
		{"check-config", "validate a configuration file, offline or (--live) against the cluster", runCheckConfig},
		{"sim", "compare pacing policies on simulated scenarios", runSim},
		{"bench", "replay: foreground latency and cleanup throughput per pacing policy on a throwaway pair", runBench},
		{"version", "the build: version, commit and Go (--json for an object)", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	switch {
	case len(args) == 2 && args[0] == "help":
		// help <command>: the command's own -h, on standard output.
		return run(ctx, []string{args[1], "-h"}, out, out)
	case len(args) == 1 && (args[0] == "--version" || args[0] == "-version"):
		return runVersion(ctx, nil, out, errOut)
	case len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help":
		usage(out)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], out, errOut)
		}
	}
	fmt.Fprintf(errOut, "throttled: unknown command %q; see `throttled help`\n", args[0])
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "throttled paces background jobs against a PostgreSQL primary's health.")
	fmt.Fprintln(w, "\nUsage: throttled <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun `throttled help <command>` (or `throttled <command> -h`) for what a command does, its flags,\nenvironment and examples; `throttled --version` for the build.")
	fmt.Fprintln(w, exitCodesHelp)
}

// logFlags are the logging flags every command takes.
type logFlags struct {
	json  bool
	level string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&l.json, "log-json", false, "log JSON lines instead of text")
	fs.StringVar(&l.level, "log-level", "info", "log level: trace, debug, info, warn, error or off")
}

// logger builds the root logger: readable text on a terminal (colour when
// it is one), JSON lines with --log-json. Parts get named sub-loggers.
func (l *logFlags) logger(w io.Writer) (hclog.Logger, error) {
	level := hclog.LevelFromString(l.level)
	if level == hclog.NoLevel {
		return nil, fmt.Errorf("%w: --log-level %q: want trace, debug, info, warn, error or off", errUsage, l.level)
	}
	color := hclog.ColorOff
	if _, isFile := w.(*os.File); isFile && !l.json {
		color = hclog.AutoColor // colour only on a terminal
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       "throttled",
		Level:      level,
		Output:     w,
		JSONFormat: l.json,
		Color:      color,
	}), nil
}

// parse parses args into fs, reporting errors (and -h) on errOut.
func parse(fs *flag.FlagSet, args []string, errOut io.Writer) error {
	fs.SetOutput(errOut)
	setUsage(fs)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}

// fail prints err and returns its exit code.
func fail(errOut io.Writer, cmd string, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	msg := strings.ReplaceAll(err.Error(), "\n", "\n  ")
	if errors.Is(err, errUsage) {
		msg = strings.TrimPrefix(msg, errUsage.Error()+": ")
		fmt.Fprintf(errOut, "throttled %s: %s\nRun `throttled %s -h` for usage.\n", cmd, msg, cmd)
		return exitUsage
	}
	fmt.Fprintf(errOut, "throttled %s: %s\n", cmd, msg)
	if invalid := (*config.InvalidError)(nil); errors.As(err, &invalid) {
		return exitConfig
	}
	return exitError
}
