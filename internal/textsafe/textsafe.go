// Package textsafe keeps text that people typed (a hold's reason, an
// actor's name) from forging lines in what other people read: the CLI's
// tables, the audit log, a terminal.
//
// Two rules, one set of characters. At the door, [Problem] finds the first
// character a reason or an actor may not hold: a control character
// (Unicode category Cc: C0 with \n, \r and \t, DEL, C1 with U+009B CSI),
// a line or paragraph separator (U+2028, U+2029), or a bidirectional
// override or isolate (U+202A–U+202E, U+2066–U+2069), which reorder what
// a terminal shows. On print, [Line] writes any text as one printable
// line, escaping as %q does what is not printable, without the quotes,
// because text stored before the door existed, and errors from a database
// or a remote process, never passed it.
package textsafe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Refused reports whether r may not appear in a one-line text people
// type: a control character, a line or paragraph separator, or a
// bidirectional override or isolate.
func Refused(r rune) bool {
	switch {
	case unicode.IsControl(r): // C0, DEL, C1
		return true
	case r == '\u2028' || r == '\u2029': // line and paragraph separators
		return true
	case r >= '\u202A' && r <= '\u202E': // LRE, RLE, PDF, LRO, RLO
		return true
	case r >= '\u2066' && r <= '\u2069': // LRI, RLI, FSI, PDI
		return true
	}
	return false
}

// Problem describes the first character of s that [Refused] refuses, by
// its kind, code point and byte offset, e.g. "control character U+000A at
// byte 6"; "" when there is none. Invalid UTF-8 is not its business
// (hold.Storable refuses it first).
func Problem(s string) string {
	for i, r := range s {
		if r == utf8.RuneError || !Refused(r) {
			continue
		}
		kind := "control character"
		switch {
		case r == '\u2028':
			kind = "line separator"
		case r == '\u2029':
			kind = "paragraph separator"
		case !unicode.IsControl(r):
			kind = "bidirectional control"
		}
		return fmt.Sprintf("%s %U at byte %d", kind, r, i)
	}
	return ""
}

// Line returns s as one printable line: every rune that is not graphic
// (not a letter, mark, number, punctuation, symbol or space; so every
// character [Refused] refuses, and format characters such as a zero-width
// space) is written as Go escapes it, \n, \x1b, \u202e, and each byte of
// invalid UTF-8 as \xNN. Ordinary text, including a backslash, is left
// as is and never quoted.
func Line(s string) string {
	if printable(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case safe(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRuneToASCII(r) // '\n', '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// safe reports whether r prints as itself on one line.
func safe(r rune) bool { return unicode.IsGraphic(r) && !Refused(r) }

func printable(s string) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return false
			}
		}
		if !safe(r) {
			return false
		}
	}
	return true
}

// OneLine folds s into one line, for text that automation forwards and
// that must not be refused for its layout (a Grafana alert's multi-line
// summary as a hold's reason): each run of characters [Refused] refuses,
// but NUL, becomes one space, and the ends are trimmed. A NUL and invalid
// UTF-8 are left as they are, for hold.Storable to refuse: text
// PostgreSQL cannot store is an error, not a layout.
func OneLine(s string) string {
	if Problem(s) == "" {
		return s
	}
	var b strings.Builder
	gap := false
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r != 0 && Refused(r) {
			gap = true
			i += size
			continue
		}
		if gap && b.Len() > 0 {
			b.WriteByte(' ')
		}
		gap = false
		b.WriteString(s[i : i+size])
		i += size
	}
	return strings.TrimSpace(b.String())
}
