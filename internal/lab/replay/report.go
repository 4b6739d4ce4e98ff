package replay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Markers delimit the replay section of a document (docs/BENCHMARKS.md).
const (
	BeginMarker = "<!-- replay:begin -->"
	EndMarker   = "<!-- replay:end -->"
)

// ReplaceSection returns doc with the text between BeginMarker and
// EndMarker replaced by body, everything else unchanged. A doc without
// the markers gets them, with body, appended at its end.
func ReplaceSection(doc, body string) (string, error) {
	i := strings.Index(doc, BeginMarker)
	j := strings.Index(doc, EndMarker)
	switch {
	case i < 0 && j < 0:
		sep := ""
		if doc != "" && !strings.HasSuffix(doc, "\n") {
			sep = "\n"
		}
		if doc != "" {
			sep += "\n"
		}
		return doc + sep + BeginMarker + "\n" + body + EndMarker + "\n", nil
	case i < 0 || j < 0 || j < i:
		return "", errors.New("replay: the document has one replay marker without the other, or them out of order")
	case strings.Count(doc, BeginMarker) > 1 || strings.Count(doc, EndMarker) > 1:
		return "", errors.New("replay: the document has more than one replay section")
	}
	return doc[:i+len(BeginMarker)] + "\n" + body + doc[j:], nil
}

// WriteDoc rewrites the replay section of the document at path with
// body, creating the file or the markers when missing.
func WriteDoc(path, body string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	doc, err := ReplaceSection(string(old), body)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}
