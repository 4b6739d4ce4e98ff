package signals

import (
	"slices"
	"strings"
	"unicode"
)

// selectors returns the vector selectors a PromQL expression reads, each as
// a selector of its own (`name{matchers}`, without its range, offset or @
// modifier), in order and without repeats.
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
	for _, x := range lex(expr).sels {
		if !slices.Contains(out, x.sel) {
			out = append(out, x.sel)
		}
	}
	return out
}

// datedSelectors returns the selectors of expr as a Prometheus signal
// dates its reading by them, and what keeps it from dating them.
//
// A signal asks for the newest sample of each (timestamp()) to date its
// reading by the data, not by the time Prometheus answered: an
// expression such as avg_over_time(x[5m]) keeps answering for five
// minutes after x stopped. Each keeps its offset (`x offset 10m`):
// timestamp(x offset 10m) is the time of the sample that offset reads,
// ten minutes old at least, and the reading is as old as its data.
//
// Problems: an @ modifier, which pins the data to one time; an offset
// that follows no selector (on a subquery or an expression in
// parentheses), whose selectors the lexer cannot tell; an offset without
// a duration it can read.
func datedSelectors(expr string) (sels, problems []string) {
	l := lex(expr)
	for _, x := range l.sels {
		d := x.sel
		if x.offset != "" {
			d += " offset " + x.offset
		}
		if !slices.Contains(sels, d) {
			sels = append(sels, d)
		}
	}
	return sels, l.problems
}

// The problems of datedSelectors.
const (
	problemAt = "@ pins the data it reads to one time: that data never grows fresher, and a rule on it would " +
		"read stale for ever; drop it (in an instant query, @ start() and @ end() are the query's own time)"
	problemOffsetPlace = "offset where it follows no selector (a subquery, an expression in parentheses, another offset): " +
		"a reading is dated by the newest sample of each selector at its own offset, and this one's selectors " +
		"cannot be told; put the offset on each selector (x offset 5m, rate(x[1m] offset 5m))"
	problemOffsetDuration = "offset without a duration it can read, such as 5m or -30s"
)

// selector is one selector an expression reads, with its offset's
// duration ("" for none).
type selector struct{ sel, offset string }

// lexed is what lex found in an expression.
type lexed struct {
	sels     []selector
	problems []string
}

// lex finds the selectors of expr, in order, with repeats.
func lex(expr string) lexed {
	var out lexed
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
	// duration reads an offset's duration at i: a sign, then digits and
	// units (5m, 1h30m, -30s); "" and i when there is none.
	duration := func(i int) (string, int) {
		sign, j := "", i
		if j < n && (r[j] == '-' || r[j] == '+') {
			sign, j = string(r[j]), skipSpace(j+1)
		}
		if j >= n || r[j] < '0' || r[j] > '9' {
			return "", i
		}
		k := j
		for k < n && (isIdentChar(r[k]) || r[k] == '.') {
			k++
		}
		return sign + string(r[j:k]), k
	}
	problem := func(p string) {
		if !slices.Contains(out.problems, p) {
			out.problems = append(out.problems, p)
		}
	}
	add := func(s string) {
		if s != "" {
			out.sels = append(out.sels, selector{sel: s})
		}
	}
	// last is the index in out.sels of the selector an offset here would
	// move (just read, or its range after it), -1 for none; ranged says
	// its range has been read.
	last, ranged := -1, false
	read := func(s string) {
		add(s)
		last, ranged = len(out.sels)-1, false
	}
	for i := 0; i < n; {
		c := r[i]
		switch {
		case unicode.IsSpace(c) || c == '#':
			i = skipSpace(i)
		case c == '"' || c == '\'' || c == '`':
			i = skipString(r, i)
			last = -1
		case c == '[':
			// A selector's range, or a subquery's (x[5m:1m] is one on x).
			i = closing(i, '[', ']')
			if ranged {
				last = -1
			}
			ranged = true
		case c == '{':
			// A selector without a name: {job="api"}.
			end := closing(i, '{', '}')
			read(string(r[i:end]))
			i = end
		case isIdentStart(c):
			j := i
			for j < n && isIdentChar(r[j]) {
				j++
			}
			word := string(r[i:j])
			k := skipSpace(j)
			switch lw := strings.ToLower(word); {
			case lw == "offset":
				d, next := duration(k)
				switch {
				case last < 0:
					problem(problemOffsetPlace)
				case d == "":
					problem(problemOffsetDuration)
				default:
					out.sels[last].offset = d
				}
				last, i = -1, max(j, next)
			case grouping[lw]:
				// by (le): label names, not selectors.
				if k < n && r[k] == '(' {
					i = closing(k, '(', ')')
				} else {
					i = j
				}
				last = -1
			case keywords[lw]:
				i, last = j, -1 // and, or; @'s start() and end()
			case k < n && r[k] == '(' || aggregation(r[k:]):
				i, last = j, -1 // a function or an aggregation (sum by (le) (x))
			case k < n && r[k] == '{':
				end := closing(k, '{', '}')
				read(word + string(r[k:end]))
				i = end
			default:
				read(word)
				i = j
			}
		case c == '@':
			problem(problemAt)
			i++
		case unicode.IsDigit(c) || c == '.':
			// A number. The first rune always: a digit of another script
			// is no identifier's.
			i++
			for i < n && (isIdentChar(r[i]) || r[i] == '.') {
				i++
			}
			last = -1
		default:
			i++
			last = -1
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

// keywords are PromQL's words that are neither selectors nor functions
// (offset aside: lex reads it).
var keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "atan2": true,
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
