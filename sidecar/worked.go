package sidecar

import "time"

// WorkedAt returns t while a token is out to a remote worker, and the zero
// time otherwise: a remote worker's batch is the sidecar's to count as the
// jobs' work (throttled.Options.Work), whatever application_name its
// sessions carry. A token seated in its job's slot is counted again, with
// its end, by the pacer it holds. Safe for concurrent use.
func (s *Server) WorkedAt(t time.Time) time.Time {
	if s.book.out() > 0 {
		return t
	}
	return time.Time{}
}
