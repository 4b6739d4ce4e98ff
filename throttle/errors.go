package throttle

import "errors"

var (
	// ErrInvalidJob is the class of errors for a job name that
	// [Job.Validate] refuses.
	ErrInvalidJob = errors.New("throttle: invalid job name")
	// ErrInvalidScope is the class of errors for a hold scope that
	// [Scope.Validate] refuses.
	ErrInvalidScope = errors.New("throttle: invalid scope")
	// ErrInvalidHold is the class of errors for a [HoldRequest] that is
	// refused, by [LocalHolds.Add] or by the durable store: a bad scope or
	// source, an empty reason, text PostgreSQL cannot store, or a TTL that
	// is negative or over the maximum (the process's, or the cluster's).
	ErrInvalidHold = errors.New("throttle: invalid hold")
	// ErrUnknownHold reports a hold ID that names no active hold: never
	// added, already released, or expired.
	ErrUnknownHold = errors.New("throttle: unknown hold")
)
