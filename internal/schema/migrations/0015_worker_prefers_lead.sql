-- A worker row of a process that prefers to lead (one that pages: the
-- sidecar). A leader that defers leadership (throttled exec, which cannot
-- page) steps down while such a process is alive, so that it leads.
ALTER TABLE throttled.workers ADD COLUMN prefers_lead boolean NOT NULL DEFAULT false;
