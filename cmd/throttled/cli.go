package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The command tree (cobra): the root, its help, the environment behind
// the flags, and usage errors worded in flag names.

const rootLong = `throttled paces background jobs against a PostgreSQL primary's health: it samples the primary (load,
connection headroom, replica lag), paces every registered job from it, and fails closed.

Where a value may come from several places, a flag beats its environment variable, which beats the
configuration file (--config, $THROTTLED_CONFIG) where the command reads one.`

// newRootCmd builds the command tree, printing on out and errOut. Each
// call builds a fresh one, so run may be called again (tests do).
func newRootCmd(out, errOut io.Writer) *cobra.Command {
	var lf logFlags
	root := &cobra.Command{
		Use:   "throttled",
		Short: "adaptive background-job throttler for PostgreSQL",
		Long:  rootLong,
		// Without a command: the help, and exit code 2.
		RunE: func(cmd *cobra.Command, args []string) error {
			_ = cmd.Help()
			return exitCode(exitUsage)
		},
		Args:          cobra.NoArgs,
		Version:       versionLine(readBuildInfo()),
		SilenceErrors: true, // run prints them, in flag names
		SilenceUsage:  true, // a usage error is one line, not the whole usage
		Annotations:   map[string]string{annotationExit: exitCodesHelp},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetHelpTemplate(helpTemplate)
	root.SetUsageTemplate(helpTemplate)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(flagError(err)) })
	// Before the completion command, which keeps the writer it is made with.
	root.SetOut(out)
	root.SetErr(errOut)
	lf.register(root.PersistentFlags())
	root.AddCommand(
		newRunCmd(&lf),
		newSignalsCmd(&lf, new(signalsOptions)),
		newExecCmd(&lf, new(execOptions)),
		newMigrateCmd(&lf),
		newPlaceHoldCmd(&lf, "pause"),
		newPlaceHoldCmd(&lf, "throttle"),
		newPlaceHoldCmd(&lf, "exempt"),
		newResumeCmd(&lf),
		newHoldsCmd(&lf),
		newStatusCmd(&lf),
		newAuditCmd(&lf),
		newCheckConfigCmd(&lf),
		newVersionCmd(),
		newManCmd(),
	)
	root.AddCommand(labCommands(&lf)...)
	root.InitDefaultCompletionCmd()
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		if c.Name() == "help" {
			c.Short = "what a command does, its flags, environment, examples and exit codes: throttled help <command>"
		}
		if c.Name() == "completion" {
			c.Short = "print the shell completion script for bash, zsh, fish or powershell"
			c.Annotations = map[string]string{annotationEnv: "none", annotationExit: "Exit codes: 0 ok, 2 usage."}
			for _, sh := range c.Commands() {
				sh.Annotations = c.Annotations
			}
		}
	}
	return root
}

// exitCode is what a command's RunE returns to exit with a code other
// than 0, having printed why itself.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// action adapts a command body that prints its own errors and returns an
// exit code (as every command here does) to cobra's RunE. The body gets
// the parsed command: its context, flags and writers.
func action(body func(cmd *cobra.Command) int) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if code := body(cmd); code != exitOK {
			return exitCode(code)
		}
		return nil
	}
}

// Annotations of a command that its help prints.
const (
	annotationEnv  = "env"  // environment variables not behind a flag, one a line
	annotationExit = "exit" // the exit codes line, when not exitCodesHelp
)

// Annotations of a flag.
const annotationFlagEnv = "throttled_env" // the flag's environment variable

const exitCodesHelp = "Exit codes: 0 ok, 1 runtime failure, 2 usage, 3 unsafe or stale (signals), 4 invalid configuration."

// helpTemplate is every command's help: usage, what it does, its flags,
// the environment it reads (generated from the flags), examples and exit
// codes.
const helpTemplate = `Usage: {{if .HasAvailableSubCommands}}{{.CommandPath}} <command> [flags]{{else}}{{.UseLine}}{{end}}
{{with .Long}}
{{.}}
{{else}}{{with .Short}}
{{.}}
{{end}}{{end}}{{if .HasAvailableSubCommands}}
Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}
{{end}}{{if .HasAvailableLocalFlags}}
Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}
{{end}}{{if .HasAvailableInheritedFlags}}
Global flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}
{{end}}{{with environmentHelp .}}
Environment:
{{.}}
{{end}}{{if .HasExample}}
Examples:
{{.Example}}
{{end}}{{if .HasAvailableSubCommands}}
Run ` + "`{{if not .HasParent}}throttled help <command>` (or `{{end}}{{.CommandPath}} <command> --help`" + `{{if not .HasParent}})` + "" + `{{end}} for what a command does,
its flags, environment and examples{{if not .HasParent}}; ` + "`throttled --version`" + ` for the build{{end}}.
{{end}}
{{exitCodesHelp .}}
`

func init() {
	cobra.AddTemplateFunc("environmentHelp", environmentHelp)
	cobra.AddTemplateFunc("exitCodesHelp", exitHelpOf)
}

// environmentHelp lists what c reads from the environment: each flag's
// variable, then the command's others, and the precedence.
func environmentHelp(c *cobra.Command) string {
	var lines []string
	hasConfig := false
	add := func(f *pflag.Flag) {
		if env := f.Annotations[annotationFlagEnv]; len(env) > 0 && !f.Hidden {
			lines = append(lines, fmt.Sprintf("  %-24s --%s", env[0], f.Name))
		}
		hasConfig = hasConfig || f.Name == "config"
	}
	c.LocalFlags().VisitAll(add)
	c.InheritedFlags().VisitAll(add)
	if extra := c.Annotations[annotationEnv]; extra != "" && extra != "none" {
		for _, l := range strings.Split(extra, "\n") {
			name, what, _ := strings.Cut(l, "  ")
			lines = append(lines, fmt.Sprintf("  %-24s %s", name, strings.TrimSpace(what)))
		}
	}
	if len(lines) == 0 {
		return "  none"
	}
	if hasConfig {
		lines = append(lines, "  A flag beats its variable, which beats the configuration file.")
	} else {
		lines = append(lines, "  A flag beats its variable.")
	}
	return strings.Join(lines, "\n")
}

// withEnv names env as the environment variable flag name reads when it
// is not given (see applyEnv), and says so in its help.
func withEnv(fs *pflag.FlagSet, name, env string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("withEnv: no flag " + name)
	}
	_ = fs.SetAnnotation(name, annotationFlagEnv, []string{env})
	f.Usage += " [$" + env + "]"
}

// applyEnv sets each flag of fs that was not given from its environment
// variable, when that is set, and returns the names of the flags given on
// the command line. A bad value is a usage error naming the variable.
func applyEnv(fs *pflag.FlagSet, getenv func(string) string) (given map[string]bool, err error) {
	given = map[string]bool{}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			given[f.Name] = true
			return
		}
		env := f.Annotations[annotationFlagEnv]
		if len(env) == 0 {
			return
		}
		v := getenv(env[0])
		if v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("$%s %q: %s", env[0], v, want(f)))
		}
	})
	return given, usageError(errors.Join(errs...))
}

// flagError rewords pflag's errors as one line naming the flag and the
// value.
func flagError(err error) error {
	var notExist *pflag.NotExistError
	var needs *pflag.ValueRequiredError
	var invalid *pflag.InvalidValueError
	var syntax *pflag.InvalidSyntaxError
	switch {
	case errors.As(err, &notExist):
		if s := notExist.GetSpecifiedShortnames(); s != "" {
			return fmt.Errorf("unknown flag -%s in -%s", notExist.GetSpecifiedName(), s)
		}
		return fmt.Errorf("unknown flag --%s", notExist.GetSpecifiedName())
	case errors.As(err, &needs):
		return fmt.Errorf("--%s needs a value", needs.GetFlag().Name)
	case errors.As(err, &invalid):
		return fmt.Errorf("--%s %q: %s", invalid.GetFlag().Name, invalid.GetValue(), want(invalid.GetFlag()))
	case errors.As(err, &syntax):
		return fmt.Errorf("bad flag syntax %s", syntax.GetSpecifiedFlag())
	}
	return err
}

// want says what a flag's value must be, by its type.
func want(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "float64", "float32":
		return "want a number"
	case "int", "int64", "int32", "uint", "uint64", "uint32":
		return "want a whole number"
	case "duration":
		return "want a duration such as 500ms, 30s or 2h"
	case "bool":
		return "want true or false"
	}
	return "invalid value"
}
