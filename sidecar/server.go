// Package sidecar is the HTTP API of `throttled run`: status, jobs, holds
// and the audit log to read; pause and resume and reload to act, each
// behind a bearer token with the right scope; and a freno-compatible check
// that answers from memory, never waiting on the database.
package sidecar

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/coord/store"
)

// maxBody bounds every request body.
const maxBody = 64 << 10

// Server serves the API. Create it with New; its handler is safe for
// concurrent use.
type Server struct {
	client *throttled.Client
	db     *holds.DB // the cluster's holds, audit log and registry
	log    hclog.Logger
	reload func(ctx context.Context) (*config.Config, error)
	// budgets are each admission class's slots (admit.go).
	budgets [numClasses]chan struct{}
	// metricsH serves /metrics, made on first use.
	metricsOnce sync.Once
	metricsH    http.Handler
	shedBy      [numClasses]atomic.Int64
	// csrfKey signs the confirm page's forms; it lives as long as the
	// process, so a restart invalidates forms already served.
	csrfKey []byte

	mu     sync.RWMutex
	cfg    *config.Config
	pacers map[string]throttled.JobPacer

	// book holds the tokens handed to remote workers, until reported or
	// expired; grantDB keeps them in throttled.grants under owner, this
	// sidecar's name, for its next run, and claim is Run's hold on the
	// name (durable.go).
	book    *grantBook
	grantDB *store.Store
	owner   string
	claim   ownerClaim
	// grantSem holds a place for each statement on throttled.grants
	// running (grantConns at most).
	grantSem chan struct{}
	// adopted marks each job whose tokens from a previous run were taken
	// up (under amu).
	amu     sync.Mutex
	adopted map[string]bool

	gmu sync.Mutex
	// starved marks a job whose last acquire got no token for want of an
	// in-flight slot, until one gets a token: its reason then names the
	// unreported tokens (under gmu).
	starved map[string]bool

	reloadsApplied, reloadsRefused, violations atomic.Int64
	vmu                                        sync.Mutex
	violByJob                                  map[string]int
	pages                                      PageCounter
	annotations                                *Annotations
	wait                                       *prometheus.HistogramVec
	reports                                    map[string]*reportTotals // by job, under gmu
}

// New returns a Server for client under cfg. reload loads, validates and
// applies a new configuration, or returns why it was refused.
func New(client *throttled.Client, cfg *config.Config, reload func(context.Context) (*config.Config, error), log hclog.Logger) (*Server, error) {
	if client.DurableHolds() == nil {
		return nil, errors.New("sidecar: the client needs a CoordinationDSN")
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	s := &Server{client: client, db: client.DurableHolds(), log: log, reload: reload, budgets: newBudgets(cfg.MaxConcurrent), csrfKey: make([]byte, 32),
		pacers: map[string]throttled.JobPacer{}, adopted: map[string]bool{}, starved: map[string]bool{}, wait: newWaitHistogram(), reports: map[string]*reportTotals{}}
	owner, err := grantOwner(cfg)
	if err != nil {
		return nil, err
	}
	s.grantDB, s.owner, s.grantSem = store.New(s.db.Pool()), owner, make(chan struct{}, grantConns)
	s.book = newGrantBook(GrantTTL, func(id string, g *grant) {
		s.log.Warn("token expired unreported: counted as a failed batch", "job", g.job, "worker", g.worker)
		s.endGrant(id, g.job, store.GrantExpired)
	})
	if _, err := rand.Read(s.csrfKey); err != nil {
		return nil, fmt.Errorf("sidecar: CSRF key: %w", err)
	}
	if err := s.Apply(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) config() *config.Config {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cfg
}
