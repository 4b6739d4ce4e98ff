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
)

// maxBody bounds every request body.
const maxBody = 64 << 10

// Server serves the API. Create it with New; its handler is safe for
// concurrent use.
type Server struct {
	client *throttled.Client
	store  *holds.Store
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
	pacers map[string]throttled.Pacer

	gmu    sync.Mutex
	grants map[string]*grant // tokens handed to remote workers, until reported
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
	s := &Server{client: client, store: client.DurableHolds(), log: log, reload: reload, budgets: newBudgets(cfg.MaxConcurrent), csrfKey: make([]byte, 32),
		pacers: map[string]throttled.Pacer{}, grants: map[string]*grant{}, starved: map[string]bool{}, wait: newWaitHistogram(), reports: map[string]*reportTotals{}}
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
