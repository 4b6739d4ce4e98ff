package hold

import "errors"

// The messages keep the "throttle:" prefix they had when the hold model
// was part of package throttle: people and scripts read them.
var (
	// ErrInvalidScope is the class of errors for a hold scope that
	// [Scope.Validate] refuses.
	ErrInvalidScope = errors.New("throttle: invalid scope")
	// ErrInvalid is the class of errors for a [Request] that is refused,
	// by [Local.Add] or by the durable store: a bad scope or source, an
	// empty reason, text PostgreSQL cannot store, or a TTL that is
	// negative or over the maximum (the process's, or the cluster's).
	ErrInvalid = errors.New("throttle: invalid hold")
	// ErrUnknown reports a hold ID that names no active hold: never
	// added, already released, or expired.
	ErrUnknown = errors.New("throttle: unknown hold")
)
