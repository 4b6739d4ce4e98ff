// Package holds makes a pause one durable, checked thing: holds live in
// the database being protected (schema throttled), every change is in an
// append-only audit log, and every process learns of a change within the
// second (LISTEN/NOTIFY, with a poll as the backstop). A process that
// cannot confirm the hold state treats every job as held: fail closed.
//
// [Migrate] creates or updates schema throttled; [New] returns a [DB] on
// it and never migrates. A DB hands out one view per concern:
//
//   - [DB.Holds], a [Store]: create, release and list holds, and the
//     cluster's rule for their life (the default and the cap).
//   - [DB.Windows], a [WindowStore]: the cluster's run and maintenance
//     windows.
//   - [DB.Audit], an [AuditLog]: append and read the audit log, and
//     record the primary the sampler reached.
//   - [DB.Registry], a [Registry]: the jobs and signals the cluster's
//     workers declare, for checking what a new hold names.
//
// [Watcher] keeps a process's view of the holds current and satisfies
// throttle.HoldSource, so the controller pauses exactly the jobs a hold
// applies to. [Enforcer] finds job sessions that keep working under a
// hold, audits them and, when configured, cancels their queries.
package holds
