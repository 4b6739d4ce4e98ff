package hold

import (
	"errors"
	"fmt"
	"time"
)

// TTLPolicy is the one rule for how long a hold lives, wherever a hold is
// made: this process's [Local], the cluster's store (holds.Config,
// and throttled.settings, which `throttled run` writes from its
// configuration), the configuration's holds block and the CLI. A zero
// field is unset: the one applying the policy fills it (see
// [TTLPolicy.Filled]), and the cluster's store leaves an unset field to
// the cluster's settings.
type TTLPolicy struct {
	// Default is a hold's life when its request gives none: long enough
	// to cover an incident, short enough that a forgotten pause ends by
	// itself. Unset, it is DefaultTTL, or Max if that is shorter.
	Default time.Duration
	// Max caps every hold's life, so no pause outlives everyone's memory
	// of it; a longer pause is renewed by a person. Unset, it is
	// DefaultMaxTTL.
	Max time.Duration
}

// Check reports what is wrong with p, naming the field and its value: a
// set field under MinTTL (or negative), and a Default over Max when
// both are set. An unset Default is never over Max: it is filled under it.
func (p TTLPolicy) Check() error {
	var errs []error
	for _, e := range p.Problems("default TTL", "max TTL") {
		errs = append(errs, errors.New(e))
	}
	return errors.Join(errs...)
}

// Problems is what Check finds, one line each, naming Default and Max as
// the caller's words for them (a configuration file's default_ttl and
// max_ttl).
func (p TTLPolicy) Problems(defaultName, maxName string) []string {
	var out []string
	for _, f := range []struct {
		name string
		ttl  time.Duration
	}{{defaultName, p.Default}, {maxName, p.Max}} {
		if f.ttl != 0 && f.ttl < MinTTL {
			out = append(out, fmt.Sprintf("%s %s is under the shortest hold, %s", f.name, f.ttl, MinTTL))
		}
	}
	if p.Default > 0 && p.Max > 0 && p.Default > p.Max {
		out = append(out, fmt.Sprintf("%s %s exceeds %s %s", defaultName, p.Default, maxName, p.Max))
	}
	return out
}

// Filled is p with its unset fields at their defaults: Max at
// DefaultMaxTTL, Default at DefaultTTL or Max if that is shorter.
func (p TTLPolicy) Filled() TTLPolicy {
	if p.Max == 0 {
		p.Max = DefaultMaxTTL
	}
	if p.Default == 0 {
		p.Default = min(DefaultTTL, p.Max)
	}
	return p
}

// TTL is the life of a hold whose request asks for ttl: ttl itself, or
// p.Default when ttl is 0 (0 again if Default is unset: the cluster's
// store then applies the cluster's default). It refuses a TTL that is
// negative, under MinTTL or over a set Max, in words that say what to
// ask for instead.
func (p TTLPolicy) TTL(ttl time.Duration) (time.Duration, error) {
	if ttl == 0 {
		if ttl = p.Default; ttl == 0 {
			return 0, nil
		}
	}
	switch {
	case ttl < 0:
		return 0, fmt.Errorf("TTL %s is negative; every hold must expire in the future", ttl)
	case ttl < MinTTL:
		return 0, fmt.Errorf("TTL %s is under the shortest accepted, %s: a hold is for people, in seconds at least", ttl, MinTTL)
	case p.Max > 0 && ttl > p.Max:
		return 0, fmt.Errorf("TTL %s exceeds the maximum %s: ask for at most %s and renew the hold if it must last longer", ttl, p.Max, p.Max)
	}
	return ttl, nil
}
