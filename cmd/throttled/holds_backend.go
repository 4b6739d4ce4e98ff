package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/coord"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/throttle/hold"
)

// holdsBackend is where pause, resume, holds and audit act: the cluster's
// database, as the CLI (source cli, the actor --actor), or a sidecar's
// API, as its token (source manual). Either may release any hold;
// automation's limits do not apply to a person.
type holdsBackend interface {
	// add places the hold r asks for (scope, TTL, reason, and a ratio for a
	// live override or a signal for an exemption); the backend sets its
	// source and actor. It refuses an exemption from a signal it does not
	// know (an error wrapping hold.ErrInvalid), and returns with
	// the hold what the person should know of it: a job no process has
	// registered.
	add(ctx context.Context, r hold.Request) (hold.Hold, []string, error)
	active(ctx context.Context) ([]hold.Hold, error)
	// release ends one hold, audited with reason; an error wrapping
	// hold.ErrUnknown when it is not active.
	release(ctx context.Context, id, reason string) (hold.Hold, error)
	audit(ctx context.Context, since time.Duration) ([]holds.Entry, error)
	// resumeLatched asks the leader to end a latched critical pause.
	resumeLatched(ctx context.Context, reason string) error
	close()
}

// backend opens the backend cf names: the sidecar at --addr, else the
// database at --primary-dsn. A backend to write migrates the schema
// first; one to read only needs a role that may read it (pg_monitor
// may).
func (cf coordFlags) backend(ctx context.Context, write bool) (holdsBackend, error) {
	if cf.addr != "" {
		return apiBackend{cf: cf}, nil
	}
	open := openDB
	if !write {
		open = openReadDB
	}
	db, err := open(ctx, cf.dsn, holds.Config{})
	if err != nil {
		return nil, err
	}
	return storeBackend{db: db, actor: cf.actor, config: cf.config}, nil
}

type storeBackend struct {
	db     *holds.DB
	actor  string
	config string // a sidecar's configuration file: its jobs and custom signals are known
}

// add makes the hold; the cluster's cap applies: the database refuses a
// longer one. The signals known are throttled's, the custom ones of
// --config's file, and those the cluster's workers declare; the jobs
// known, --config's and the cluster's.
func (s storeBackend) add(ctx context.Context, r hold.Request) (hold.Hold, []string, error) {
	r.Source, r.Actor = hold.SourceCLI, s.actor
	if err := s.db.Holds().Check(r); err != nil {
		return hold.Hold{}, nil, err
	}
	var jobs, custom []string
	if s.config != "" {
		cfg, err := config.LoadWithoutSecrets(s.config)
		if err != nil {
			return hold.Hold{}, nil, err
		}
		for _, j := range cfg.Jobs {
			jobs = append(jobs, j.Name)
		}
		for _, c := range cfg.Custom {
			custom = append(custom, string(c.Name))
		}
	}
	if err := s.db.Registry().CheckExempt(ctx, r.Exempt, custom); err != nil {
		if errors.Is(err, hold.ErrInvalid) && s.config == "" {
			err = fmt.Errorf("%w (a sidecar's custom signals are known with --config and its file)", err)
		}
		return hold.Hold{}, nil, err
	}
	h, err := s.db.Holds().Add(ctx, r)
	if err != nil {
		return hold.Hold{}, nil, err
	}
	warnings, err := s.db.Registry().ScopeWarnings(ctx, r.Scope, jobs)
	if err != nil {
		warnings = []string{"could not check that a process has registered the hold's jobs: " + err.Error()}
	}
	return h, warnings, nil
}

func (s storeBackend) active(ctx context.Context) ([]hold.Hold, error) {
	return s.db.Holds().Active(ctx)
}

func (s storeBackend) release(ctx context.Context, id, reason string) (hold.Hold, error) {
	return s.db.Holds().Release(ctx, id, s.actor, hold.SourceCLI, reason)
}

func (s storeBackend) audit(ctx context.Context, since time.Duration) ([]holds.Entry, error) {
	return s.db.Audit().Since(ctx, time.Now().Add(-since))
}

func (s storeBackend) resumeLatched(ctx context.Context, reason string) error {
	return coord.RequestResume(ctx, s.db, s.actor, reason)
}

func (s storeBackend) close() { s.db.Pool().Close() }

type apiBackend struct{ cf coordFlags }

func (a apiBackend) call(ctx context.Context, method, path string, body, answer any) error {
	raw, err := apiCall(ctx, a.cf.addr, a.cf.token, method, path, body)
	if err != nil {
		return err
	}
	if answer != nil {
		if err := json.Unmarshal(raw, answer); err != nil {
			return fmt.Errorf("%s %s: unreadable answer from %s: %w", method, path, a.cf.addr, err)
		}
	}
	return nil
}

func (a apiBackend) add(ctx context.Context, r hold.Request) (hold.Hold, []string, error) {
	var h api.Hold
	req := api.PauseRequest{Scope: r.Scope.String(), Reason: r.Reason, Ratio: r.Ratio, Exempt: r.Exempt}
	if r.TTL > 0 {
		req.TTL = r.TTL.String() // else the sidecar's default, the cluster's
	}
	if err := a.call(ctx, "POST", "/v1/holds", req, &h); err != nil {
		if e := (*apiError)(nil); errors.As(err, &e) && e.Status == http.StatusBadRequest {
			return hold.Hold{}, nil, fmt.Errorf("%w: %w", hold.ErrInvalid, err)
		}
		return hold.Hold{}, nil, err
	}
	hold, err := sidecar.HoldFromJSON(h)
	return hold, h.Warnings, err
}

func (a apiBackend) active(ctx context.Context) ([]hold.Hold, error) {
	var list []api.Hold
	if err := a.call(ctx, "GET", "/v1/holds", nil, &list); err != nil {
		return nil, err
	}
	out := make([]hold.Hold, 0, len(list))
	for _, x := range list {
		h, err := sidecar.HoldFromJSON(x)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

func (a apiBackend) release(ctx context.Context, id, reason string) (hold.Hold, error) {
	var h api.Hold
	err := a.call(ctx, "DELETE", "/v1/holds/"+url.PathEscape(id)+"?reason="+url.QueryEscape(reason), nil, &h)
	if e := (*apiError)(nil); errors.As(err, &e) && e.Status == http.StatusNotFound {
		return hold.Hold{}, fmt.Errorf("%w: %w", hold.ErrUnknown, err)
	}
	if err != nil {
		return hold.Hold{}, err
	}
	return sidecar.HoldFromJSON(h)
}

func (a apiBackend) audit(ctx context.Context, since time.Duration) ([]holds.Entry, error) {
	var list []api.AuditEntry
	if err := a.call(ctx, "GET", "/v1/audit?since="+since.String(), nil, &list); err != nil {
		return nil, err
	}
	out := make([]holds.Entry, 0, len(list))
	for _, x := range list {
		e := holds.Entry{ID: x.ID, At: x.At, Event: x.Event, Actor: x.Actor, Source: x.Source, Reason: x.Reason, HoldID: x.HoldID}
		if len(x.Detail) > 0 {
			if err := json.Unmarshal(x.Detail, &e.Detail); err != nil {
				return nil, fmt.Errorf("audit entry %d: unreadable detail: %w", x.ID, err)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

func (a apiBackend) resumeLatched(ctx context.Context, reason string) error {
	return a.call(ctx, "POST", "/v1/resume", api.ResumeRequest{Reason: reason}, nil)
}

func (apiBackend) close() {}
