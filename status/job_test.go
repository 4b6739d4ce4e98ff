package status

import (
	"errors"
	"strings"
	"testing"
)

func TestJobValidate(t *testing.T) {
	for _, tc := range []struct {
		job  Job
		want string // "" means valid
	}{
		{"purge", ""},
		{"purge_sessions.v2-a", ""},
		{"9lives", ""},
		{Job(strings.Repeat("a", 53)), ""},
		{"", "must not be empty"},
		{Job(strings.Repeat("a", 54)), "54 characters"},
		{"Bad Name", `status: invalid job name "Bad Name": has 'B'`},
		{"purge sessions", `has ' '`},
		{"_purge", "must start with a lowercase letter or digit"},
		{"purge/x", `has '/'`},
		{"pürge", `has 'ü'`},
	} {
		err := tc.job.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Job(%q).Validate() = %v; want nil", tc.job, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Job(%q).Validate() = %v; want error containing %q", tc.job, err, tc.want)
		case tc.want != "" && !errors.Is(err, ErrInvalidJob):
			t.Errorf("Job(%q).Validate() = %v; want errors.Is ErrInvalidJob", tc.job, err)
		}
	}
}
