package fuzzcrash

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A panic in a background goroutine, the death a fuzz worker reports
// without a trace, leaves its trace in the directory Env names. The test
// runs itself again as the process that dies.
func TestKeepWritesAGoroutinesPanic(t *testing.T) {
	if os.Getenv("FUZZCRASH_DIE") != "" {
		Keep(t)
		done := make(chan struct{})
		go func() {
			defer close(done)
			panic("fuzzcrash: the background goroutine's panic")
		}()
		<-done
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKeepWritesAGoroutinesPanic$")
	cmd.Env = append(os.Environ(), "FUZZCRASH_DIE=1", Env+"="+dir)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the process that panics exited 0:\n%s", out)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.txt"))
	if len(files) != 1 {
		t.Fatalf("trace files %v; want one", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "the background goroutine's panic") || !strings.Contains(string(b), "goroutine") {
		t.Errorf("trace file %s:\n%s\nwant the panic and its goroutine's stack", files[0], b)
	}
}
