package signals

import (
	"errors"
	"fmt"
)

var (
	// ErrMissingGrant is the class of errors for a role that cannot read
	// other sessions' activity. See [GrantError].
	ErrMissingGrant = errors.New("signals: role cannot read other sessions")
	// ErrSuperuser reports a sampler role that is a superuser while
	// Config.AllowSuperuser is false.
	ErrSuperuser = errors.New("signals: role is a superuser; sample as a role granted pg_monitor instead (or set AllowSuperuser)")
	// ErrTimeout marks a sample that failed because a query or a
	// connection attempt ran out of time.
	ErrTimeout = errors.New("signals: timed out")
	// ErrReplicaMissing is the class of errors for a replica that is
	// known but not streaming. See [ReplicaMissingError].
	ErrReplicaMissing = errors.New("signals: replica missing")
	// ErrWrongServer reports a primary DSN that points at a server in
	// recovery, or a replica DSN that points at one that is not.
	ErrWrongServer = errors.New("signals: wrong kind of server")
	// ErrUnreachable marks a sample (or a Connect) that failed because no
	// connection to the server could be opened.
	ErrUnreachable = errors.New("signals: server unreachable")
	// ErrNotConnected marks a sample taken while the server's connection
	// is down and the next reconnect is not due yet. Such errors also wrap
	// the last connection failure (and so ErrUnreachable).
	ErrNotConnected = errors.New("signals: not connected")
)

// GrantError reports that Role lacks pg_read_all_stats (part of
// pg_monitor), found at connect or on any later tick. Without it,
// pg_stat_activity shows other users' sessions with NULL state and
// primary_load would silently read 0, so every signal of the server fails
// with it instead; the next tick that finds the grant back recovers, on
// the same connection.
type GrantError struct {
	Role string
}

func (e *GrantError) Error() string {
	return fmt.Sprintf("signals: role %q cannot see other sessions in pg_stat_activity: missing grant pg_read_all_stats; run GRANT pg_monitor TO %q", e.Role, e.Role)
}

// Is makes errors.Is(err, ErrMissingGrant) true.
func (e *GrantError) Is(target error) bool { return target == ErrMissingGrant }

// ReplicaMissingError reports that Replica, known from a physical slot, a
// replica DSN, Config.Replicas or an earlier sample, has no streaming
// walsender on the primary.
type ReplicaMissingError struct {
	Replica string
	Reason  string
}

func (e *ReplicaMissingError) Error() string {
	return fmt.Sprintf("signals: replica %q is missing: %s", e.Replica, e.Reason)
}

// Is makes errors.Is(err, ErrReplicaMissing) true.
func (e *ReplicaMissingError) Is(target error) bool { return target == ErrReplicaMissing }
