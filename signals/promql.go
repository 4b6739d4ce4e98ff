package signals

import (
	"slices"
	"strings"
	"unicode"
)

// selectors returns the vector selectors a PromQL expression reads, each as
// a selector of its own (`name{matchers}`, without its range, offset or @
// modifier), in order and without repeats. A Prometheus signal asks for
// the newest sample of each (timestamp()) to date its reading by the data,
// not by the time Prometheus answered: an expression such as
// avg_over_time(x[5m]) keeps answering for five minutes after x stopped.
//
// It is a lexer, not a parser: Prometheus itself judges the expression
// (a syntax error comes back in its own words). It skips strings,
// comments, numbers, durations in brackets, the label lists of grouping
// clauses (by, without, on, ignoring, group_left, group_right) and the
// names of functions and aggregations (an identifier followed by '(').
// What it cannot read as a selector it leaves out; an expression with no
// selector (vector(1)) is dated by Prometheus's evaluation time alone.
func selectors(expr string) []string {
	var out []string
	r := []rune(expr)
	n := len(r)
	skipSpace := func(i int) int {
		for i < n {
			switch {
			case unicode.IsSpace(r[i]):
				i++
			case r[i] == '#':
				for i < n && r[i] != '\n' {
					i++
				}
			default:
				return i
			}
		}
		return i
	}
	// closing returns the index after the bracket that closes the one at
	// i (open), skipping strings; n when there is none.
	closing := func(i int, open, close rune) int {
		depth := 0
		for i < n {
			switch c := r[i]; {
			case c == '"' || c == '\'' || c == '`':
				i = skipString(r, i)
				continue
			case c == open:
				depth++
			case c == close:
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return n
	}
	add := func(s string) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	afterOffset := false
	for i := 0; i < n; {
		c := r[i]
		switch {
		case unicode.IsSpace(c) || c == '#':
			i = skipSpace(i)
		case c == '"' || c == '\'' || c == '`':
			i = skipString(r, i)
		case c == '[':
			i = closing(i, '[', ']')
		case c == '{':
			// A selector without a name: {job="api"}.
			end := closing(i, '{', '}')
			add(string(r[i:end]))
			i = end
		case isIdentStart(c):
			j := i
			for j < n && isIdentChar(r[j]) {
				j++
			}
			word := string(r[i:j])
			k := skipSpace(j)
			switch {
			case afterOffset:
				// offset's duration, or @'s start() and end().
				afterOffset = false
				i = j
			case grouping[strings.ToLower(word)]:
				// by (le): label names, not selectors.
				if k < n && r[k] == '(' {
					i = closing(k, '(', ')')
				} else {
					i = j
				}
			case keywords[strings.ToLower(word)]:
				afterOffset = strings.EqualFold(word, "offset")
				i = j
			case k < n && r[k] == '(' || aggregation(r[k:]):
				i = j // a function or an aggregation (sum by (le) (x))
			case k < n && r[k] == '{':
				end := closing(k, '{', '}')
				add(word + string(r[k:end]))
				i = end
			default:
				add(word)
				i = j
			}
		case c == '@':
			afterOffset = true
			i++
		case unicode.IsDigit(c) || c == '.':
			// A number, or a duration such as 5m after offset. The first
			// rune always: a digit of another script is no identifier's.
			i++
			for i < n && (isIdentChar(r[i]) || r[i] == '.') {
				i++
			}
			afterOffset = false
		default:
			i++
		}
	}
	return out
}

// skipString returns the index after the string literal starting at i.
func skipString(r []rune, i int) int {
	q := r[i]
	i++
	for i < len(r) {
		switch {
		case r[i] == '\\' && q != '`':
			i += 2
			continue
		case r[i] == q:
			return i + 1
		}
		i++
	}
	return len(r)
}

func isIdentStart(c rune) bool {
	return c == '_' || c == ':' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func isIdentChar(c rune) bool { return isIdentStart(c) || ('0' <= c && c <= '9') }

// grouping are the clauses whose parentheses hold label names.
var grouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// keywords are PromQL's words that are neither selectors nor functions.
var keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"inf": true, "nan": true, "start": true, "end": true}

// aggregation reports whether r starts with a grouping clause of an
// aggregation written before its argument: by (le) ( or without (le) (.
func aggregation(r []rune) bool {
	for _, w := range []string{"by", "without"} {
		if len(r) > len(w) && strings.EqualFold(string(r[:len(w)]), w) && !isIdentChar(r[len(w)]) {
			return true
		}
	}
	return false
}
