// Command throttled paces background jobs against a PostgreSQL primary's
// health. See `throttled help`.
package main

import (
	// The IANA time zone database, for run windows in named zones on a
	// machine (or an image FROM scratch) without /usr/share/zoneinfo.
	_ "time/tzdata"

	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/textsafe"
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
// Its text never reaches the user: fail prints what it wraps.
var errUsage = errors.New("invalid usage")

// usageError marks err as the caller's.
func usageError(err error) error {
	if err == nil || errors.Is(err, errUsage) {
		return err
	}
	return fmt.Errorf("%w: %w", errUsage, err)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args (without the program's name) and
// returns the exit code. Commands print their own results on out and
// their errors on errOut; run prints the usage errors the command tree
// finds before a command runs.
func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	root := newRootCmd(out, errOut)
	root.SetArgs(args)
	root.SetIn(os.Stdin)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	if code := exitCode(0); errors.As(err, &code) {
		return int(code)
	}
	name := ""
	if cmd != nil && cmd.HasParent() {
		name = commandName(cmd)
	}
	return fail(errOut, name, usageError(err))
}

// logFlags are the logging flags every command takes (global flags).
type logFlags struct {
	json  bool
	level string
}

func (l *logFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&l.json, "log-json", false, "log JSON lines instead of text")
	fs.StringVar(&l.level, "log-level", "info", "log level: trace, debug, info, warn, error or off")
	withEnv(fs, "log-json", "THROTTLED_LOG_JSON")
	withEnv(fs, "log-level", "THROTTLED_LOG_LEVEL")
}

// logger builds the root logger: readable text on a terminal (colour when
// it is one), JSON lines with --log-json. Parts get named sub-loggers.
func (l *logFlags) logger(w io.Writer) (hclog.Logger, error) {
	level := hclog.LevelFromString(l.level)
	if level == hclog.NoLevel {
		return nil, usageError(fmt.Errorf("--log-level %q: want trace, debug, info, warn, error or off", l.level))
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

// fail prints err and returns its exit code: 2 for a usage error (one
// line a problem, naming the flag), 4 for an invalid configuration file,
// else 1.
// cmd is the command's name below the root, "" for the root.
func fail(errOut io.Writer, cmd string, err error) int {
	if errors.Is(err, pflag.ErrHelp) {
		return exitOK
	}
	prog := strings.TrimSpace("throttled " + cmd)
	if errors.Is(err, errUsage) {
		msg := shownLines(usageText(err))
		fmt.Fprintf(errOut, "%s: %s (see `%s --help`)\n", prog, msg, prog)
		return exitUsage
	}
	msg := shownLines(err.Error())
	fmt.Fprintf(errOut, "%s: %s\n", prog, msg)
	if invalid := (*config.InvalidError)(nil); errors.As(err, &invalid) {
		return exitConfig
	}
	return exitError
}

// shownLines is an error's text as the terminal shows it: each line
// indented after the first, and within each line every control character
// escaped, so a database's error or a stored text cannot move the cursor,
// set the title or forge a line of its own.
func shownLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = textsafe.Line(l)
	}
	return strings.Join(lines, "\n  ")
}

// usageText is a usage error's text without the errUsage marker, however
// deep it was wrapped.
func usageText(err error) string {
	msg := err.Error()
	for {
		trimmed := strings.Replace(msg, errUsage.Error()+": ", "", 1)
		if trimmed == msg {
			return msg
		}
		msg = trimmed
	}
}
