package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// docs/SIGNALS.md shows every statement exactly as the sampler runs it,
// has a section for every signal, and states each default rule as the
// controller has it.
func TestSignalsDocIsTrue(t *testing.T) {
	raw, err := os.ReadFile("../../docs/SIGNALS.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, q := range signals.Queries() {
		if !strings.Contains(doc, "```sql\n"+q.SQL+"\n```") {
			t.Errorf("docs/SIGNALS.md lacks the statement for %v as the code runs it:\n%s", q.Signals, q.SQL)
		}
	}
	for _, n := range signals.Names {
		if !strings.Contains(doc, "### `"+string(n)+"`") {
			t.Errorf("docs/SIGNALS.md has no section for %s", n)
		}
	}
	for n, r := range throttle.DefaultRules() {
		want := fmt.Sprintf("`%s` target %v", n, r.Target)
		if r.Critical != 0 {
			want += fmt.Sprintf(", critical %v", r.Critical)
		}
		if !strings.Contains(doc, want) {
			t.Errorf("docs/SIGNALS.md does not state the default rule %q", want)
		}
	}
}
