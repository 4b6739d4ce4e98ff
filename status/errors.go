package status

import "errors"

var (
	// ErrInvalidJob is the class of errors for a job name that
	// [Job.Validate] refuses.
	ErrInvalidJob = errors.New("status: invalid job name")
)
