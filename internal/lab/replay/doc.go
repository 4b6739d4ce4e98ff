// Package replay is the end-to-end benchmark behind `throttled bench
// replay`: on a throwaway primary and streaming replica
// (internal/testenv/pgcluster), a foreground load generator runs a pgbench-like
// mix open loop at a fixed arrival rate while a cleanup job deletes the
// old half of a large table through the jobs library. Each scenario is a
// timeline of faults (a surge, a CPU hog, replay paused, a connection
// storm, lock contention, the 2026-09-13 case of a saturated primary with
// no replica lag); each policy paces the job differently (none,
// back-to-back, fixed rates, lag-only, binary go/no-go, and throttled's
// own controller). Every run starts from the same table state; an
// independent signals.Poller, not the one pacing the job, measures the
// primary's load and the replica's lag. Results are markdown tables and
// one PNG per run.
package replay
