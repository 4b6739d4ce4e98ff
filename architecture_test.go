package throttled_test

import (
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// modulePath is this module's path: docs/ARCHITECTURE.md names its
// packages relative to it, and the root as "throttled".
const modulePath = "github.com/throttled/throttled"

// otherModules maps the short names docs/ARCHITECTURE.md gives other
// modules to the import path each stands for (the path or a parent of it).
var otherModules = map[string]string{
	"pgx":               "github.com/jackc/pgx/v5",
	"go-hclog":          "github.com/hashicorp/go-hclog",
	"client_golang":     "github.com/prometheus/client_golang",
	"prometheus/common": "github.com/prometheus/common",
	"procfs":            "github.com/prometheus/procfs",
	"hcl/v2":            "github.com/hashicorp/hcl/v2",
	"go-cty":            "github.com/zclconf/go-cty",
	"cobra":             "github.com/spf13/cobra",
	"pflag":             "github.com/spf13/pflag",
	"go-isatty":         "github.com/mattn/go-isatty",
	"x/sys":             "golang.org/x/sys",
	"x/time/rate":       "golang.org/x/time/rate",
	"river":             "github.com/riverqueue/river",
	"gonum/plot":        "gonum.org/v1/plot",
}

// archLine is one line of the import graph: the packages it is about, the
// module's packages they import and the other modules' short names.
type archLine struct {
	text        string
	pkgs        []string
	lab         bool // "-tags lab": what the lab build imports besides
	ours, other []string
}

// archGraph reads the code block under "## Import direction" in
// docs/ARCHITECTURE.md.
func archGraph(t *testing.T) []archLine {
	t.Helper()
	b, err := os.ReadFile("docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Import direction\n")
	if !ok {
		t.Fatal("docs/ARCHITECTURE.md has no section \"Import direction\"")
	}
	_, block, ok := strings.Cut(sec, "```\n")
	if block, _, ok = strings.Cut(block, "```\n"); !ok {
		t.Fatal("the import direction has no code block")
	}
	list := func(s string) []string {
		var out []string
		for _, f := range strings.Split(s, ",") {
			if f = strings.TrimSpace(f); f != "" {
				out = append(out, f)
			}
		}
		return out
	}
	var lines []archLine
	for _, text := range strings.Split(strings.TrimSpace(block), "\n") {
		left, right, ok := strings.Cut(text, "──►")
		if !ok || strings.Contains(right, "──►") {
			t.Fatalf("graph line %q: want one \"──►\"", text)
		}
		l := archLine{text: text}
		if left, l.lab = strings.CutSuffix(strings.TrimSpace(left), ", -tags lab"); l.lab && strings.Contains(left, ",") {
			t.Fatalf("graph line %q: a lab line is about one package", text)
		}
		l.pkgs = list(left)
		right, _, _ = strings.Cut(right, "(") // the note
		ours, other, _ := strings.Cut(right, "·")
		l.ours, l.other = list(ours), list(other)
		lines = append(lines, l)
	}
	return lines
}

// goImports lists each of the module's packages with its direct imports
// (not its tests'), in the build with tags.
func goImports(t *testing.T, tags ...string) map[string][]string {
	t.Helper()
	args := append(append([]string{"list"}, tags...), "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		m[f[0]] = f[1:]
	}
	return m
}

// docName is how docs/ARCHITECTURE.md names one of the module's packages.
func docName(path string) (string, bool) {
	if path == modulePath {
		return "throttled", true
	}
	rest, ok := strings.CutPrefix(path, modulePath+"/")
	return rest, ok
}

// split divides imports into the module's packages (as the doc names
// them) and the short names of the other modules; a standard library
// package is neither. An import of a module otherNames lacks is reported.
func split(t *testing.T, imports []string) (ours, other []string) {
	t.Helper()
	for _, imp := range imports {
		if name, ok := docName(imp); ok {
			ours = append(ours, name)
			continue
		}
		if !strings.Contains(strings.Split(imp, "/")[0], ".") {
			continue // the standard library
		}
		found := ""
		for name, path := range otherModules {
			if imp == path || strings.HasPrefix(imp, path+"/") {
				found = name
			}
		}
		if found == "" {
			t.Errorf("%s is in no module the test knows a short name for: add it to otherModules and the graph", imp)
			continue
		}
		if !slices.Contains(other, found) {
			other = append(other, found)
		}
	}
	return ours, other
}

// The import graph in docs/ARCHITECTURE.md is true: every package of the
// module has a line, and each line names exactly the module's packages and
// the other modules the package imports, in the product build; the lab
// build's line for cmd/throttled names exactly what it adds. Fix the doc by
// the line the failure prints.
func TestArchitectureImports(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	product, lab := goImports(t), goImports(t, "-tags", "lab")
	seen := map[string]bool{}
	for _, l := range archGraph(t) {
		for _, name := range l.pkgs {
			path := modulePath
			if name != "throttled" {
				path += "/" + name
			}
			imports, ok := product[path]
			if !ok {
				t.Errorf("graph line %q: no package %s", l.text, path)
				continue
			}
			wantOurs, wantOther := split(t, imports)
			if l.lab {
				labOurs, labOther := split(t, lab[path])
				wantOurs = slices.DeleteFunc(labOurs, func(p string) bool { return slices.Contains(wantOurs, p) })
				wantOther = slices.DeleteFunc(labOther, func(p string) bool { return slices.Contains(wantOther, p) })
			} else {
				seen[path] = true
			}
			if !sameSet(l.ours, wantOurs) || !sameSet(l.other, wantOther) {
				t.Errorf("graph line %q: %s imports\n\t%s · %s\nnot\n\t%s · %s", l.text, name,
					strings.Join(sorted(wantOurs), ", "), strings.Join(sorted(wantOther), ", "),
					strings.Join(sorted(l.ours), ", "), strings.Join(sorted(l.other), ", "))
			}
		}
	}
	for _, path := range slices.Sorted(maps.Keys(product)) {
		if !seen[path] {
			t.Errorf("docs/ARCHITECTURE.md's import graph has no line for %s", path)
		}
	}
	// The product outside internal/ never imports testing.
	for path, imports := range product {
		if name, _ := docName(path); !strings.HasPrefix(name, "internal/") && slices.Contains(imports, "testing") {
			t.Errorf("%s imports testing", path)
		}
	}
}

func sameSet(a, b []string) bool { return slices.Equal(sorted(a), sorted(b)) }

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }
