//go:build lab

package main

import "github.com/spf13/cobra"

// The lab build (go build -tags lab, make lab: bin/throttled-lab) is the
// product plus the commands that launch throwaway clusters, replay
// workloads, simulate and plot. The production binary and image are built
// without the tag and carry none of that code (lab_off.go).

// labBuild says the lab is in this build.
const labBuild = true

// labCommands are the lab's commands in the tree.
func labCommands(lf *logFlags) []*cobra.Command {
	return []*cobra.Command{newDemoCmd(lf), newSimCmd(), newBenchCmd()}
}
