package benchdoc

import (
	"strings"
	"testing"
)

// The idle- and quiet-primary rows have no anchor: their goals read their
// own metrics.
func TestIdleQuietGoals(t *testing.T) {
	const out = `pkg: github.com/throttled/throttled/cmd/throttled
BenchmarkIdlePrimary-2   1   7948 ceiling-rows/s   800.5 exec-rows/s   0.1007 of-ceiling
BenchmarkQuietPrimary-2  1   0.84 exec-p99-on/alone  1533 exec-rows/s  649 fg-tx/s  0.92 of-oracle  8000 oracle-rows/s
`
	rs, err := Parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	table := Table(rs)
	if row := rowOf(t, table, "throttled/IdlePrimary"); row[6] != "of-ceiling ≥ 0.9" || row[7] != "no" {
		t.Errorf("idle row: goal %q met %q", row[6], row[7])
	}
	if row := rowOf(t, table, "throttled/QuietPrimary"); row[7] != "yes" {
		t.Errorf("quiet row: goal %q met %q", row[6], row[7])
	}
}
