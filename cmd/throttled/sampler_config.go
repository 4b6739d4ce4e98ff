package main

import (
	"fmt"
	"maps"
	"slices"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/throttle"
)

// samplerConfig is what signals and exec take from a sidecar's
// configuration file for the flags not given: the primary's DSN and
// cores, and the replicas (required ones, and those sampled directly).
type samplerConfig struct {
	primaryDSN       string
	cores            float64
	replicaDSNs      []string
	requiredReplicas []string
}

func samplerFromConfig(path string) (samplerConfig, error) {
	cfg, err := config.LoadWithoutSecrets(path)
	if err != nil {
		return samplerConfig{}, err
	}
	if what, unset := config.Unset(cfg.PrimaryDSN); unset {
		return samplerConfig{}, usageError(fmt.Errorf("--config %s: the primary's dsn is %s, which is not set", path, what))
	}
	sc := samplerConfig{primaryDSN: cfg.PrimaryDSN, cores: cfg.Cores}
	for _, name := range slices.Sorted(maps.Keys(cfg.ReplicaDSNs)) {
		dsn := cfg.ReplicaDSNs[name]
		if what, unset := config.Unset(dsn); unset {
			return samplerConfig{}, usageError(fmt.Errorf("--config %s: replica %q's dsn is %s, which is not set", path, name, what))
		}
		sc.replicaDSNs = append(sc.replicaDSNs, dsn)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Replicas)) {
		if cfg.Replicas[name] == throttle.ReplicaRequired {
			sc.requiredReplicas = append(sc.requiredReplicas, name)
		}
	}
	return sc, nil
}

// fill sets what the flags left empty from sc.
func (sc samplerConfig) fill(dsn *string, cores *float64, replicaDSNs, replicas *[]string) {
	*dsn = firstNonEmpty(*dsn, sc.primaryDSN)
	if *cores == 0 {
		*cores = sc.cores
	}
	if len(*replicaDSNs) == 0 {
		*replicaDSNs = sc.replicaDSNs
	}
	if len(*replicas) == 0 {
		*replicas = sc.requiredReplicas
	}
}
