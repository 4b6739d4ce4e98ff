// Package coord is coordinated mode: many processes pacing jobs against
// one cluster. Every process is a worker: a row in throttled.workers per
// job, a local limiter, a heartbeat that reports its consumption and reads
// its lease. The process holding a session advisory lock is also the
// leader: it alone samples, decides with a throttle.Controller, and
// publishes each worker's allocation with a short lease (package store
// runs every statement). A worker whose lease lapses stops: fail closed.
package coord
