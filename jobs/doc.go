// Package jobs is the library users wrap around their cleanup and batch
// jobs. It makes the polite way the easy way: hand over a function that
// processes one batch, and a [Job] paces it through a [Pacer], sizes its
// batches toward a target duration, bounds its retries, checkpoints its
// progress in the same transaction as each batch, and stops the moment
// its pacer says a pause applies.
//
// jobs declares the small interfaces it consumes ([Pacer], [DB]) and
// imports neither the controller (package throttle) nor the signals
// package, only the shared vocabulary of package status: the pacers
// throttled.Client and the sidecar's remote client hand out satisfy
// Pacer, and *pgxpool.Pool satisfies DB.
//
// Every batch runs in its own transaction with SET LOCAL statement_timeout
// and application_name "throttled:<job>", so throttled can see the job's
// sessions on the primary (and notice one that ignores a pause).
package jobs
