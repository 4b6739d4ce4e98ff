-- Each worker declares the tables its job writes and, optionally, the job
-- rules (gates) that bind it, so a coordinated leader gates the job as a
-- solo process would: a vacuum on one of its tables pauses it and no other
-- job. signals NULL means every job rule binds it; an older worker writes
-- neither and is bound by every job rule, on no table.
ALTER TABLE throttled.workers ADD COLUMN tables text[] NOT NULL DEFAULT '{}';
ALTER TABLE throttled.workers ADD COLUMN signals text[];
