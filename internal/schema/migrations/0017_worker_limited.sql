-- The seconds a worker's job spent at each limit in the worker's process
-- (throttle.Why: full_rate, a signal, slow_start, hold:<source>, ...), as
-- its last heartbeat counted them: `throttled status` read from the
-- database says where each worker's time went, as --addr does.
ALTER TABLE throttled.workers ADD COLUMN limited_seconds jsonb NOT NULL DEFAULT '{}'::jsonb;
