-- Whether a caller waited for the worker's limiter since its previous
-- heartbeat: the job wants more than its share, so the leader neither
-- lends the share away as idle nor holds the budget as unused.
ALTER TABLE throttled.workers ADD COLUMN waiting boolean NOT NULL DEFAULT false;
