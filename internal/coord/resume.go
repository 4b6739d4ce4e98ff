package coord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/coord/store"
	"github.com/throttled/throttled/throttle/hold"
)

// resume.go: a person's request to end the leader's latched critical
// pause, from any process or from the CLI.

// ErrNotLatched is a resume asked of a cluster in no latched critical
// pause.
var ErrNotLatched = errors.New("throttled: no latched critical pause to resume")

// RequestResume asks the cluster's leader to end its latched critical
// pause, as actor, and audits the request with reason (event mode,
// source manual). The leader acts on its next decision, within a tick;
// the pause then ends as any critical pause does, once the signals are
// calm. ErrNotLatched when the last published decision is not latched:
// then nothing is asked or audited. It gives up after 5 s.
func RequestResume(ctx context.Context, db *holds.DB, actor, reason string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	latched, err := store.New(db.Pool()).RequestResume(ctx, actor)
	if err != nil {
		return fmt.Errorf("throttled: request a resume: %w", err)
	}
	if !latched {
		return ErrNotLatched
	}
	if reason == "" {
		reason = "no reason given"
	}
	return db.Audit().Append(ctx, holds.Entry{Event: holds.EventMode, Actor: actor, Source: string(hold.SourceManual),
		Reason: "resume of the latched critical pause requested: " + reason})
}
