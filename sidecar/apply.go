package sidecar

import (
	"maps"
	"net/http"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/sidecar/api"
)

// Apply makes cfg current: its tokens, and a worker for every configured
// job. New jobs are registered, changed ones updated, removed ones
// stopped; the database work happens outside the lock the check path
// reads under, and a failure undoes the jobs this call added.
func (s *Server) Apply(cfg *config.Config) error {
	s.mu.RLock()
	have := maps.Clone(s.pacers)
	was := map[string]jobs.Config{}
	if s.cfg != nil {
		for _, j := range s.cfg.Jobs {
			was[j.Name] = jobConfig(j)
		}
	}
	s.mu.RUnlock()
	next := map[string]throttled.JobPacer{}
	var added, updated []string
	// A refused configuration changes nothing: the jobs it added go, the
	// ones it changed get their limits back.
	undo := func() {
		for _, name := range added {
			_ = s.client.RemoveJob(name)
		}
		for _, name := range updated {
			if err := s.client.UpdateJob(was[name]); err != nil {
				s.log.Error("cannot restore a job's limits after a refused configuration", "job", name, "error", err)
			}
		}
	}
	for _, j := range cfg.Jobs {
		jc := jobConfig(j)
		if p, ok := have[j.Name]; ok {
			updated = append(updated, j.Name) // restored on undo even if this update fails half-way
			if err := s.client.UpdateJob(jc); err != nil {
				undo()
				return err
			}
			next[j.Name] = p
			continue
		}
		p, err := s.client.Pacer(jc)
		if err != nil {
			undo()
			return err
		}
		added = append(added, j.Name)
		next[j.Name] = s.withGrants(j.Name, p)
	}
	s.mu.Lock()
	old := s.pacers
	s.pacers, s.cfg = next, cfg
	s.mu.Unlock()
	for name := range old {
		if _, kept := next[name]; !kept {
			if err := s.client.RemoveJob(name); err != nil {
				s.log.Warn("cannot remove a job dropped from the configuration", "job", name, "error", err)
			}
		}
	}
	return nil
}

// jobConfig is a configured job's pacing, as the client registers it.
func jobConfig(j config.Job) jobs.Config {
	return jobs.Config{Name: j.Name, Weight: j.Weight, MinRate: j.MinRate, MaxRate: j.MaxRate, Tables: j.Tables, Signals: j.Signals}
}

func (s *Server) doReload(w http.ResponseWriter, r *http.Request, tok config.Token) {
	cfg, err := s.reload(r.Context())
	if err != nil {
		writeJSON(w, http.StatusConflict, api.ReloadAnswer{Applied: false, Error: err.Error(), ConfigVersion: s.config().Version})
		return
	}
	writeJSON(w, http.StatusOK, api.ReloadAnswer{Applied: true, ConfigVersion: cfg.Version, By: tok.Name})
}
