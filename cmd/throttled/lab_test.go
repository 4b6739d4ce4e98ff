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

// The product's tests, built without the lab tag, link no lab package and
// no plotting library: a test that needs the lab is tagged lab (make test
// runs with the tag), so `go test ./...` tests the product as it ships.
// The lab's own packages are left out: they are the lab.
func TestProductTestsImportNoLab(t *testing.T) {
	if testing.Short() {
		t.Skip("lists every package's test dependencies")
	}
	const module = "github.com/throttled/throttled/"
	out, err := exec.Command("go", "list", "-test", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, module+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -test: %v\n%s", err, out)
	}
	tested := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		// A test binary's packages are "p [p.test]" (the package with its
		// test files) and "p_test [p.test]"; the rest are the packages as
		// they ship.
		if len(f) < 2 || !strings.HasSuffix(f[1], ".test]") {
			continue
		}
		pkg := f[0]
		if strings.HasPrefix(pkg, module+"internal/lab/") {
			continue
		}
		tested++
		var lab []string
		for _, d := range f[2:] {
			if strings.HasPrefix(d, module+"internal/lab/") || strings.HasPrefix(d, "gonum.org/") {
				lab = append(lab, d)
			}
		}
		if len(lab) > 0 {
			t.Errorf("%s %s links the lab without the lab tag: %d packages, such as %s", pkg, f[1], len(lab), lab[0])
		}
	}
	if tested < 10 {
		t.Fatalf("only %d test packages listed; the check above proves nothing:\n%s", tested, out)
	}
}
