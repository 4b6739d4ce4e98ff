package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The production binary, built without the lab tag, carries no cluster
// launcher, replay, simulator, test harness or plotting library, and its
// demo, bench and sim say where they are instead of running.
func TestProductBuildCarriesNoLab(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	const module = "github.com/throttled/throttled/"
	deps := func(tags ...string) []string {
		args := append([]string{"list", "-deps"}, tags...)
		out, err := exec.Command("go", append(args, module+"cmd/throttled")...).CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.Fields(string(out))
	}
	lab := func(p string) bool {
		return strings.HasPrefix(p, module+"internal/lab/") || strings.HasPrefix(p, module+"internal/testenv/") || strings.HasPrefix(p, "gonum.org/")
	}
	var leaked []string
	for _, p := range deps() {
		if lab(p) {
			leaked = append(leaked, p)
		}
	}
	if len(leaked) > 0 {
		t.Errorf("the production build imports the lab: %s", strings.Join(leaked, ", "))
	}
	// The lab build is the product plus the lab: the check above looks
	// for packages that are there.
	found := false
	for _, p := range deps("-tags", "lab") {
		found = found || p == module+"internal/lab/replay"
	}
	if !found {
		t.Fatalf("the lab build does not import internal/lab/replay; the check above proves nothing")
	}

	bin := filepath.Join(t.TempDir(), "throttled")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	help, err := exec.Command(bin, "--help").Output()
	if err != nil {
		t.Fatalf("throttled --help: %v", err)
	}
	for _, name := range []string{"demo", "bench", "sim"} {
		if strings.Contains(string(help), "\n  "+name+" ") {
			t.Errorf("the production help lists %s:\n%s", name, help)
		}
		out, err := exec.Command(bin, name, "--plots", "x").CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUsage {
			t.Errorf("throttled %s: %v, want exit %d\n%s", name, err, exitUsage, out)
		}
		if !strings.Contains(string(out), "lab build") || !strings.Contains(string(out), "make lab") {
			t.Errorf("throttled %s does not say where it is:\n%s", name, out)
		}
	}
}
