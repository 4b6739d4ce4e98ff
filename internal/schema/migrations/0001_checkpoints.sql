-- Progress of each job, written in the same transaction as its batches, so
-- a crash resumes exactly after the last committed batch.
CREATE TABLE throttled.checkpoints (
    job        text PRIMARY KEY,
    position   text,
    batches    bigint NOT NULL DEFAULT 0,
    rows       bigint NOT NULL DEFAULT 0,
    started_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    done_at    timestamptz
);
