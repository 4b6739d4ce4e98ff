-- Run windows and maintenance windows, per job: `throttled run` writes
-- them from its file (holds.Store.SetWindows, audited), and every process's
-- hold watcher reads them with the holds and applies them as holds of
-- source window by its own clock. So a job stays out of its windows in
-- every process, including ones started later, whether or not the sidecar
-- is up when a window closes. spec is throttle.ParseWindow's text; name is
-- '' for a run window and the maintenance window's name for an avoided one.
CREATE TABLE throttled.windows (
    job  text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('run', 'avoid')),
    name text NOT NULL DEFAULT '',
    spec text NOT NULL,
    PRIMARY KEY (job, kind, name, spec)
);

-- A change wakes every watcher, as a hold's change does.
CREATE FUNCTION throttled.windows_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('throttled_holds', 'windows');
    RETURN NULL;
END $$;
CREATE TRIGGER windows_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON throttled.windows
    FOR EACH STATEMENT EXECUTE FUNCTION throttled.windows_notify();
