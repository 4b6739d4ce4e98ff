//go:build !lab

package main

import "testing"

// drawOverview is the product build's: the plotting library is in the lab
// build only (make test runs with it), so the series are checked but not
// drawn.
func drawOverview(t *testing.T, _ overview, path string) {
	t.Helper()
	t.Logf("overview plot: not drawn to %s; the lab build (-tags lab) draws it", path)
}
