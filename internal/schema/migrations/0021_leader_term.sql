-- The leader's fencing term: each process that takes the leader's lock
-- raises it, on the lock's own session, before it publishes; every
-- publication writes only while the term is still its writer's, in the
-- same statement. A leader that was frozen (a stopped process, a long
-- pause) and whose session the server ended meanwhile cannot publish on
-- stale authority when it wakes: its next publication finds a newer
-- term, writes nothing, and it steps down.
ALTER TABLE throttled.leader ADD COLUMN term bigint NOT NULL DEFAULT 0;
