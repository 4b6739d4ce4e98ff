package main

import (
	"errors"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// parseWith parses args into cmd as the command tree does before a
// command runs: under a root with the global flags, with its help flag,
// errors worded in flag names. It runs nothing.
func parseWith(cmd *cobra.Command, lf *logFlags, args []string, errOut io.Writer) error {
	root := &cobra.Command{Use: "throttled", SilenceErrors: true, SilenceUsage: true}
	lf.register(root.PersistentFlags())
	root.SetHelpTemplate(helpTemplate)
	root.SetOut(errOut)
	root.SetErr(errOut)
	root.AddCommand(cmd)
	cmd.InitDefaultHelpFlag()
	if err := cmd.ParseFlags(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			_ = cmd.Help()
			return err
		}
		return usageError(flagError(err))
	}
	if err := cmd.Args(cmd, cmd.Flags().Args()); err != nil {
		return usageError(err)
	}
	return nil
}

// parseExecFlags parses args as `throttled exec` does, through its
// command, and runs the command's own check with getenv.
func parseExecFlags(args []string, getenv func(string) string, errOut io.Writer) (execOptions, error) {
	var lf logFlags
	var o execOptions
	cmd := newExecCmd(&lf, &o)
	if err := parseWith(cmd, &lf, args, errOut); err != nil {
		return o, err
	}
	o.log = lf
	return o, o.check(cmd.Flags(), getenv)
}

// parseSignalsFlags parses args as `throttled signals` does.
func parseSignalsFlags(args []string, getenv func(string) string, errOut io.Writer) (signalsOptions, error) {
	var lf logFlags
	var o signalsOptions
	cmd := newSignalsCmd(&lf, &o)
	if err := parseWith(cmd, &lf, args, errOut); err != nil {
		return o, err
	}
	o.log = lf
	return o, o.check(cmd.Flags(), getenv)
}
