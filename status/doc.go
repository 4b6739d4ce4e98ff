// Package status is throttled's shared vocabulary: the words every part
// uses to say how a job runs and why, as rivertype is River's. It holds
// types and pure functions only, and imports no controller, so the jobs
// library, River's middleware, the pager, the metrics, the HTTP API and
// the CLI speak of a job in the same terms as the controller that
// decides:
//
//   - [Job], a job's validated name;
//   - [Mode] (the controller's), [JobState] (a job's), and [Code], a
//     closed set that says why, for machines ([Code.Go]: may it start a
//     batch now);
//   - [JobStatus], one job's status ([Held] and [Scaled] under holds),
//     and [Explainer], the one interface of a pacer that reports it;
//   - [Binding], the signal that limits the budget;
//   - [Why], what limits a job in one word of a bounded set ([WhyOf],
//     [Whys]), the label every metric, the API and the CLI use;
//   - [Event], what a decision tells a person or the audit log.
//
// The controller (package throttle) produces these; internal/pacing
// applies them to the jobs' limiters.
package status
