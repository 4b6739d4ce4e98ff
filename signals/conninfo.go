package signals

import (
	"net/url"
	"strings"
)

// conninfoValue returns the value of key in a libpq connection string,
// either keyword/value ("host=a application_name='my app'") or URI
// ("postgres://a/db?application_name=x"). It reads one key and returns
// nothing else, so a password elsewhere in the string never leaves it.
func conninfoValue(conninfo, key string) (string, bool) {
	s := strings.TrimSpace(conninfo)
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		u, err := url.Parse(s)
		if err != nil {
			return "", false
		}
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil || !q.Has(key) {
			return "", false
		}
		return q.Get(key), true
	}
	var found string
	var ok bool
	for s != "" {
		s = strings.TrimLeft(s, " \t\n\r")
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return "", false
		}
		k := strings.TrimSpace(s[:eq])
		s = strings.TrimLeft(s[eq+1:], " \t\n\r")
		var v string
		var closed bool
		if strings.HasPrefix(s, "'") {
			v, s, closed = quotedValue(s[1:])
			if !closed {
				return "", false
			}
		} else {
			end := strings.IndexAny(s, " \t\n\r")
			if end < 0 {
				end = len(s)
			}
			v = unescape(s[:end])
			s = s[end:]
		}
		if k == key {
			found, ok = v, true
		}
	}
	return found, ok
}

// quotedValue reads a single-quoted value up to its closing quote, with
// backslash escapes, and returns the value, the rest, and whether the
// quote was closed.
func quotedValue(s string) (string, string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			}
		case '\'':
			return b.String(), s[i+1:], true
		default:
			b.WriteByte(s[i])
		}
	}
	return "", "", false
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
