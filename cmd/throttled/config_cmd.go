package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/throttled/throttled/config"
)

func runCheckConfig(ctx context.Context, args []string, out, errOut io.Writer) int {
	var path string
	var live bool
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.StringVar(&path, "config", "", "the configuration file (required)")
	fs.BoolVar(&live, "live", false, "make every check run makes before it starts: also a listen block, and against the cluster (the primary is one, every configured replica exists, every replica DSN reaches that replica)")
	if err := parse(fs, args, errOut); err != nil {
		return fail(errOut, "check-config", err)
	}
	if path == "" {
		return fail(errOut, "check-config", fmt.Errorf("%w: --config is required", errUsage))
	}
	load := func(_ context.Context, path string) (*config.Config, error) { return config.Load(path) }
	if live {
		load = loadToRun
	}
	c, err := load(ctx, path)
	if err != nil {
		return fail(errOut, "check-config", err)
	}
	var replicas []string
	for name, p := range c.Replicas {
		replicas = append(replicas, name+" ("+string(p)+")")
	}
	var jobNames []string
	for _, j := range c.Jobs {
		jobNames = append(jobNames, j.Name)
	}
	how := "offline"
	if live {
		how = "offline and against the cluster"
	}
	fmt.Fprintf(out, "%s: valid (%s), version %s\n  cores %v; replicas: %s; jobs: %s; %d tokens; %d notifiers; listen %s\n",
		path, how, c.Version, c.Cores, orNone(replicas), orNone(jobNames), len(c.Tokens), len(c.Notifiers), orNone([]string{c.Listen}))
	return exitOK
}

// loadToRun loads the file at path and makes every check of a
// configuration that run makes, at start and on reload, before it uses
// one: the offline validation, a listen block, and the checks against the
// cluster. check-config --live makes exactly these, so the two agree.
func loadToRun(ctx context.Context, path string) (*config.Config, error) {
	c, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	if c.Listen == "" {
		return nil, fmt.Errorf("config: %s: a listen block is required to run", path)
	}
	// Never start against a cluster the file does not describe.
	if err := c.Live(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func orNone(s []string) string {
	if len(s) == 0 || (len(s) == 1 && s[0] == "") {
		return "none"
	}
	return strings.Join(s, ", ")
}
