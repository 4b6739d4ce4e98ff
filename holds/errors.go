package holds

import "errors"

// Errors.
var (
	// ErrPersonsHold reports an attempt by automation to release a hold a
	// person made.
	ErrPersonsHold = errors.New("holds: automation may not release a person's hold")
	// ErrSchemaBehind reports a schema throttled that lacks migrations
	// this binary needs, found by [CheckSchema].
	ErrSchemaBehind = errors.New("holds: schema throttled is behind this throttled")
)
