// Package metrics declares the metrics a throttled.Client exports, which
// the sidecar exports too: every descriptor in one list ([Describe]), and
// a job's series ([CollectJobs]), its why label in the words of package
// status. The Client's collector is [Extensible], so the sidecar adds its
// configured jobs to it rather than rendering them a second way.
package metrics
