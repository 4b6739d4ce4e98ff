package throttled_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every fuzz target in the module is in the Makefile's FUZZ_TARGETS, so
// make test fuzzes it: a parser whose fuzz target is left out is tested
// only on its seeds.
func TestEveryFuzzTargetIsRun(t *testing.T) {
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)`)
	found := 0
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "deploy" || d.Name() == "out" || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(src), -1) {
			found++
			target := "./" + filepath.ToSlash(filepath.Dir(path)) + ":" + m[1]
			if filepath.Dir(path) == "." {
				target = ".:" + m[1]
			}
			if !strings.Contains(string(mk), target+" ") && !strings.Contains(string(mk), target+"\n") {
				t.Errorf("%s (%s) is not in the Makefile's FUZZ_TARGETS", target, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 10 {
		t.Fatalf("found %d fuzz targets; the walk reads too little", found)
	}
}
