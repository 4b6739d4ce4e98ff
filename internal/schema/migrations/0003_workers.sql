-- Workers: every process pacing jobs against this cluster registers here
-- and heartbeats its consumption; the leader writes back each worker's
-- allocation with a short lease. A worker whose lease has expired stops.
CREATE TABLE throttled.workers (
    id             text PRIMARY KEY,
    job            text NOT NULL,
    weight         float8 NOT NULL DEFAULT 1,
    min_rate       float8 NOT NULL DEFAULT 0,
    max_rate       float8 NOT NULL DEFAULT 0,
    started_at     timestamptz NOT NULL DEFAULT now(),
    heartbeat_at   timestamptz NOT NULL DEFAULT now(),
    batches        bigint NOT NULL DEFAULT 0,
    errors         bigint NOT NULL DEFAULT 0,
    duration_ms    float8 NOT NULL DEFAULT 0,
    alloc_rate     float8 NOT NULL DEFAULT 0,
    alloc_burst    int NOT NULL DEFAULT 0,
    alloc_inflight int NOT NULL DEFAULT 0,
    lease_until    timestamptz NOT NULL DEFAULT '-infinity',
    state          text NOT NULL DEFAULT 'paused',
    reason         text NOT NULL DEFAULT 'waiting for the leader''s first allocation',
    binding        text NOT NULL DEFAULT ''
);

-- The leader's last published decision: what a new leader starts from.
CREATE TABLE throttled.leader (
    id           int PRIMARY KEY CHECK (id = 1),
    leader       text NOT NULL,
    budget       float8 NOT NULL,
    mode         text NOT NULL,
    binding      text NOT NULL DEFAULT '',
    reason       text NOT NULL DEFAULT '',
    published_at timestamptz NOT NULL DEFAULT now()
);
