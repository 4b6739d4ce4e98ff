//go:build !lab

package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// The production build carries no cluster launcher, replay, simulator or
// plotting library. demo, sim and bench are in the lab build (lab.go);
// here each answers, hidden from the help, where to find it.

// labBuild says the lab is in this build.
const labBuild = false

// labCommands are stand-ins that name the lab build.
func labCommands(*logFlags) []*cobra.Command {
	var cmds []*cobra.Command
	for _, name := range []string{"demo", "sim", "bench"} {
		cmds = append(cmds, &cobra.Command{
			Use:                name,
			Short:              "in the lab build only",
			Hidden:             true,
			DisableFlagParsing: true,
			Annotations:        map[string]string{annotationEnv: "none", annotationExit: "Exit codes: 2, always: the command is in the lab build."},
			RunE: func(cmd *cobra.Command, _ []string) error {
				fmt.Fprintf(cmd.ErrOrStderr(), "throttled %s: not in this production binary, which carries no cluster launcher, replay, simulator or plotting; it is in the lab build: make lab writes bin/throttled-lab (go build -tags lab ./cmd/throttled), and make demo runs the demo\n", name)
				return exitCode(exitUsage)
			},
		})
	}
	return cmds
}
