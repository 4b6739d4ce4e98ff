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
	return replaceMarked(doc, BeginMarker, EndMarker, body)
}

// replaceMarked is ReplaceSection between the markers begin and end.
func replaceMarked(doc, BeginMarker, EndMarker, body string) (string, error) {
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
		return "", fmt.Errorf("replay: the document has one of %s and %s without the other, or them out of order", BeginMarker, EndMarker)
	case strings.Count(doc, BeginMarker) > 1 || strings.Count(doc, EndMarker) > 1:
		return "", fmt.Errorf("replay: the document has more than one %s section", BeginMarker)
	}
	return doc[:i+len(BeginMarker)] + "\n" + body + doc[j:], nil
}

// WriteDoc rewrites the replay section of the document at path with
// body, creating the file or the markers when missing.
func WriteDoc(path, body string) error {
	return WriteMarked(path, BeginMarker, EndMarker, body)
}

// WriteMarked rewrites the text between the markers begin and end of the
// document at path with body, as WriteDoc does for the replay section.
func WriteMarked(path, begin, end, body string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	doc, err := replaceMarked(string(old), begin, end, body)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}
