package status

import (
	"fmt"

	"github.com/throttled/throttled/internal/jobname"
)

// Job is a registered job's name, e.g. "purge_sessions". Names are part
// of the product's contract: holds, metrics labels, the HTTP API and the
// jobs' application_name use them. See [Job.Validate] for the syntax.
type Job string

// Validate reports whether j is a usable job name: 1 to 53 characters of
// a-z, 0-9, '_', '.' and '-', starting with a letter or digit (53 because
// the job's sessions carry "throttled:<job>" in application_name, which
// PostgreSQL truncates past 63 bytes). The error wraps [ErrInvalidJob] and
// names the value.
func (j Job) Validate() error {
	if p := jobname.Problem(string(j)); p != "" {
		return fmt.Errorf("%w %q: %s", ErrInvalidJob, string(j), p)
	}
	return nil
}
