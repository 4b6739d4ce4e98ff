// Package jobname holds the one rule for job names, and the one for a
// job's weight and rate limits, shared by the throttle, jobs and config
// packages (throttle and jobs may not import each other). A job's name
// appears in SQL application_name, metrics labels, holds and URLs.
package jobname

import (
	"fmt"
	"unicode/utf8"
)

// MaxLen is PostgreSQL's NAMEDATALEN-1 less the "throttled:" prefix the
// job's sessions carry in application_name, which the server truncates
// past 63 bytes.
const MaxLen = 63 - len(AppPrefix)

// AppPrefix starts the application_name of every job session.
const AppPrefix = "throttled:"

// Problem says what is wrong with s as a job name, or as the start of one
// (a group prefix obeys the same rules), or "" if nothing is: 1 to MaxLen
// characters of a-z, 0-9, '_', '.' and '-', starting with a letter or
// digit.
func Problem(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if n := utf8.RuneCountInString(s); n > MaxLen {
		return fmt.Sprintf("is %d characters long; at most %d fit in PostgreSQL's application_name after %q", n, MaxLen, AppPrefix)
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
