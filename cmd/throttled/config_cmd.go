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
	fs.BoolVar(&live, "live", false, "also check against the cluster: the primary is one, every configured replica exists")
	if err := parse(fs, args, errOut); err != nil {
		return fail(errOut, "check-config", err)
	}
	if path == "" {
		return fail(errOut, "check-config", fmt.Errorf("%w: --config is required", errUsage))
	}
	c, err := config.Load(path)
	if err != nil {
		return fail(errOut, "check-config", err)
	}
	if live {
		if err := c.Live(ctx); err != nil {
			return fail(errOut, "check-config", err)
		}
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

func orNone(s []string) string {
	if len(s) == 0 || (len(s) == 1 && s[0] == "") {
		return "none"
	}
	return strings.Join(s, ", ")
}
