package holds

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle/hold"
)

// Registry is what the cluster knows of: the jobs and signals its
// workers declare, read from throttled.workers and throttled.checkpoints.
// A hold that names what nothing knows does nothing, silently: an
// exemption from a signal that does not exist is refused (the person
// meant another); a hold on a job no process has registered is placed,
// since a job may start after its pause, but answered with a warning.
// Get one from [DB.Registry]. It is safe for concurrent use.
type Registry struct {
	db *pgxpool.Pool
}

// Jobs returns the jobs the cluster knows of, sorted: those of its
// registered workers (a coordinated process registers each job it paces;
// a worker silent for a minute is forgotten) and those with a checkpoint
// (a job that committed a batch).
func (s *Registry) Jobs(ctx context.Context) ([]string, error) {
	return s.names(ctx, `SELECT job FROM throttled.workers UNION SELECT job FROM throttled.checkpoints ORDER BY 1`)
}

// Signals returns the signals of the job rules the cluster's registered
// workers declare binding them, custom signals included, sorted.
func (s *Registry) Signals(ctx context.Context) ([]string, error) {
	return s.names(ctx, `SELECT DISTINCT unnest(signals) FROM throttled.workers WHERE signals IS NOT NULL ORDER BY 1`)
}

func (s *Registry) names(ctx context.Context, query string) ([]string, error) {
	rows, err := s.db.Query(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("holds: read what the cluster knows: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("holds: read what the cluster knows: %w", err)
	}
	return out, nil
}

// CheckExempt refuses an exemption from a signal that is neither one of
// throttled's own (signals.Names) nor one of custom (the custom signals
// the caller knows of, such as a sidecar's configured ones), with an error
// wrapping [hold.ErrInvalid] that names both lists. An empty name
// is no exemption and passes.
func CheckExempt(name string, custom []string) error {
	if name == "" || signals.Known(signals.Name(name)) || slices.Contains(custom, name) {
		return nil
	}
	builtin := make([]string, len(signals.Names))
	for i, n := range signals.Names {
		builtin[i] = string(n)
	}
	custom = slices.DeleteFunc(slices.Compact(slices.Sorted(slices.Values(custom))), func(n string) bool { return signals.Known(signals.Name(n)) })
	known := "none"
	if len(custom) > 0 {
		known = strings.Join(custom, ", ")
	}
	return fmt.Errorf("%w: exempt %q: no such signal; throttled's signals are %s; custom signals known: %s",
		hold.ErrInvalid, name, strings.Join(builtin, ", "), known)
}

// CheckExempt is [CheckExempt] with the custom signals the cluster's
// workers declare added to custom.
func (s *Registry) CheckExempt(ctx context.Context, name string, custom []string) error {
	if CheckExempt(name, custom) == nil {
		return nil
	}
	declared, err := s.Signals(ctx)
	if err != nil {
		return err
	}
	return CheckExempt(name, append(slices.Clip(custom), declared...))
}

// ScopeWarnings says what is wrong with a valid scope that cannot be
// refused: a job that none of known is, or a group no job of known is in.
// A hold on all jobs, or on what known has, says nothing.
func ScopeWarnings(sc hold.Scope, known []string) []string {
	switch sc.Kind {
	case hold.ScopeOneJob:
		if !slices.Contains(known, sc.Value) {
			return []string{fmt.Sprintf("no process has registered job %q: the hold is placed and applies if such a job starts; check the name (see throttled status)", sc.Value)}
		}
	case hold.ScopeGroup:
		if !slices.ContainsFunc(known, func(j string) bool { return strings.HasPrefix(j, sc.Value) }) {
			return []string{fmt.Sprintf("no process has registered a job whose name starts with %q: the hold is placed and applies if such a job starts; check the prefix (see throttled status)", sc.Value)}
		}
	}
	return nil
}

// ScopeWarnings is [ScopeWarnings] against the jobs of known (such as a
// sidecar's configured ones) and the jobs the cluster knows of
// ([Registry.Jobs]).
func (s *Registry) ScopeWarnings(ctx context.Context, sc hold.Scope, known []string) ([]string, error) {
	if sc.Kind == hold.ScopeAllJobs || ScopeWarnings(sc, known) == nil {
		return nil, nil
	}
	jobs, err := s.Jobs(ctx)
	if err != nil {
		return nil, err
	}
	return ScopeWarnings(sc, append(slices.Clip(known), jobs...)), nil
}
