//go:build lab

package sidecar_test

import (
	"os"
	"testing"

	"github.com/throttled/throttled/internal/lab/benchdoc"
)

// writeLoadDoc replaces the load section of the document at path with doc
// (make load: docs/BENCHMARKS.md).
func writeLoadDoc(t *testing.T, path, doc string) {
	t.Helper()
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, err := benchdoc.Splice(string(old), "load", doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}
