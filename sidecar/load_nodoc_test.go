//go:build !lab

package sidecar_test

import "testing"

// writeLoadDoc is the product build's: the document's section is written
// by the lab's benchdoc, which make load builds with -tags lab.
func writeLoadDoc(t *testing.T, path, _ string) {
	t.Helper()
	t.Fatalf("THROTTLED_LOAD_DOC=%s: writing the document needs the lab build (go test -tags lab; make load)", path)
}
