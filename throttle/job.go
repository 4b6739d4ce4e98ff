package throttle

import (
	"fmt"
	"unicode/utf8"
)

// Job is a registered job's name, e.g. "purge_sessions". Names are part
// of the product's contract: holds, metrics labels, the HTTP API and the
// jobs' application_name use them. See [Job.Validate] for the syntax.
type Job string

// maxJobLen is PostgreSQL's NAMEDATALEN-1: the server truncates
// application_name, which carries the job's name, beyond it.
const maxJobLen = 63

// Validate reports whether j is a usable job name: 1 to 63 characters of
// a-z, 0-9, '_', '.' and '-', starting with a letter or digit. The error
// wraps [ErrInvalidJob] and names the value.
func (j Job) Validate() error {
	if p := namePrefixProblem(string(j)); p != "" {
		return fmt.Errorf("%w %q: %s", ErrInvalidJob, string(j), p)
	}
	return nil
}

// namePrefixProblem says what is wrong with s as a job name, or as the
// start of one (a group prefix obeys the same rules), or "" if nothing is.
func namePrefixProblem(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if n := utf8.RuneCountInString(s); n > maxJobLen {
		return fmt.Sprintf("is %d characters long; at most %d fit in PostgreSQL's application_name", n, maxJobLen)
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case (r == '_' || r == '.' || r == '-') && i > 0:
		case i == 0 && (r == '_' || r == '.' || r == '-'):
			return fmt.Sprintf("must start with a lowercase letter or digit, not %q", r)
		default:
			return fmt.Sprintf("has %q at byte %d; use only a-z, 0-9, '_', '.' and '-'", r, i)
		}
	}
	return ""
}
