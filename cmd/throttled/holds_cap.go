package main

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/throttle/hold"
)

// setHoldCap writes cfg's holds block (default_ttl, max_ttl) as the
// cluster's hold policy: the database enforces the cap for every client,
// and a hold placed without a TTL (the CLI without --ttl) lives the
// default. `throttled run` calls it at start and on each applied reload,
// so the sidecar's file is the authority. It writes cfg's windows too.
// Bounded by 5 s.
func setHoldCap(ctx context.Context, db *holds.DB, cfg *config.Config, path string, log hclog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	old, err := db.Holds().SetTTL(ctx, cfg.HoldTTL, "throttled", hold.SourceAuto,
		fmt.Sprintf("holds of %s (version %s)", path, cfg.Version))
	if err != nil {
		return fmt.Errorf("%s: holds default_ttl %s, max_ttl %s: %w", path, cfg.HoldTTL.Default, cfg.HoldTTL.Max, err)
	}
	if old != cfg.HoldTTL {
		log.Info("cluster hold TTLs set", "default_ttl", cfg.HoldTTL.Default, "max_ttl", cfg.HoldTTL.Max,
			"previous_default_ttl", old.Default, "previous_max_ttl", old.Max, "file", path)
	}
	// The windows live in the cluster too, so every process applies them,
	// including while this one is down.
	if err := db.Windows().Set(ctx, cfg.Windows, "throttled", hold.SourceAuto,
		fmt.Sprintf("windows of %s (version %s)", path, cfg.Version)); err != nil {
		return fmt.Errorf("%s: windows: %w", path, err)
	}
	return nil
}
