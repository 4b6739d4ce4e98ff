// Package fuzzcrash keeps a fuzz worker's fatal error. go test -fuzz runs
// each worker as a process of its own and discards its standard error, so
// a worker that dies of an unrecovered panic in a background goroutine (or
// any fatal error) is reported only as "fuzzing process hung or terminated
// unexpectedly", with no trace. Keep has the runtime write that trace to a
// file too, where scripts/fuzz-all prints it.
package fuzzcrash

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// Env names the directory the traces go to; unset, Keep does nothing.
const Env = "THROTTLED_FUZZ_CRASH_DIR"

// Keep has a fatal error of this process written, beside standard error,
// to a file named for f (a fuzz target, as a rule) and the process in
// $THROTTLED_FUZZ_CRASH_DIR.
func Keep(f testing.TB) {
	f.Helper()
	dir := os.Getenv(Env)
	if dir == "" {
		return
	}
	out, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.txt", f.Name(), os.Getpid())))
	if err != nil {
		f.Fatalf("fuzzcrash: %v", err)
	}
	defer out.Close() // SetCrashOutput keeps its own descriptor
	if err := debug.SetCrashOutput(out, debug.CrashOptions{}); err != nil {
		f.Fatalf("fuzzcrash: %v", err)
	}
}
