package dashboards

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/throttled/throttled/status"
)

// whyMatcherRe finds a why label's matcher or value in PromQL, a series
// or JSON (whose quotes are escaped): why="x", why!="x", why=~"a|b".
var whyMatcherRe = regexp.MustCompile(`\bwhy\s*(=~|!~|!=|=)\s*\\?"([^"\\]*)\\?"`)

// TestWhyValuesAreTheOneSet: every why value the shipped dashboards, the
// alert rules and their tests, and the docs name is a word of
// status.Whys, the one set every metric, the API and the CLI render a
// job's why in; each alternative of a regular expression matches one. On the old code throttled_jobs_state said "no
// valid allocation" and "binding primary_load" where
// throttled_jobs_limited_seconds_total said unavailable and primary_load:
// a rule written against one never matched the other.
func TestWhyValuesAreTheOneSet(t *testing.T) {
	set := status.Whys()
	var files []string
	for _, pattern := range []string{"*.json", "*.go", "README.md", "../deploy/*.yml", "../docs/*.md", "../README.md"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range whyMatcherRe.FindAllStringSubmatch(string(b), -1) {
			seen++
			if problem := whyValueProblem(m[1], m[2], set); problem != "" {
				t.Errorf("%s: %s: %s", f, m[0], problem)
			}
		}
	}
	if seen < 5 {
		t.Fatalf("only %d why matchers in %d files: the scan finds none of the rules' and dashboards'", seen, len(files))
	}
}

// whyValueProblem says what is wrong with a why matcher's value v under
// operator op, "" when nothing is.
func whyValueProblem(op, v string, set []status.Why) string {
	if op == "=" || op == "!=" {
		if !slices.Contains(set, status.Why(v)) {
			return "not a word of status.Whys"
		}
		return ""
	}
	if _, err := regexp.Compile(v); err != nil {
		return err.Error()
	}
	for _, alt := range strings.Split(v, "|") {
		re, err := regexp.Compile("^(?:" + alt + ")$")
		if err != nil {
			return "alternative " + alt + ": " + err.Error()
		}
		if !slices.ContainsFunc(set, func(w status.Why) bool { return re.MatchString(string(w)) }) {
			return "alternative " + alt + " matches no word of status.Whys"
		}
	}
	return ""
}

// The check itself: the old words fail, the set's pass.
func TestWhyValueProblem(t *testing.T) {
	set := status.Whys()
	for _, tc := range []struct {
		op, v string
		ok    bool
	}{
		{"=", "gated", true},
		{"=", "hold:manual", true},
		{"=", "no valid allocation", false},
		{"=", "binding primary_load", false},
		{"!=", "running", false},
		{"=~", "critical|stale", true},
		{"=~", "hold:.*", true},
		{"=~", "critical|binding .*", false},
		{"=~", "stale|no valid allocation", false},
		{"=~", "(", false},
	} {
		if got := whyValueProblem(tc.op, tc.v, set); (got == "") != tc.ok {
			t.Errorf("why%s%q: problem %q; want ok %v", tc.op, tc.v, got, tc.ok)
		}
	}
}
