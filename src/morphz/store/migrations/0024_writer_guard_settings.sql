-- 0024_writer_guard_settings: 0023's guard on the writes that record no event. 0023 guards
-- event inserts only, but an older process writes some rows without an event: it saves a
-- calibration (context_settings) after a provider report and before the reply is recorded, so
-- it could write back a calibration 0021 dropped; it sets a budget or a view; it creates a
-- context. These triggers call the same function (store/sqlite_migrations.py, writer_guard),
-- registered only on the connections of a Morphz that knows 0023, so such a write of an older
-- process is refused too ("no such function: morphz_upgraded_store_guard"). Deletes stay
-- allowed: they are how a person removes a damaged row by hand (active_base.damaged_setting).
-- Updates of ``contexts`` are not guarded: every Morphz so far updates a context's row only with
-- the event it records (last_seq), which 0023 refuses; a trigger there ran on every commit and
-- observation, and cost them about 6% (benchmarks/core_bench.py --quick, commit p50).
CREATE TRIGGER IF NOT EXISTS context_settings_insert_guard BEFORE INSERT ON context_settings
BEGIN
    SELECT morphz_upgraded_store_guard();
END;
CREATE TRIGGER IF NOT EXISTS context_settings_update_guard BEFORE UPDATE ON context_settings
BEGIN
    SELECT morphz_upgraded_store_guard();
END;
CREATE TRIGGER IF NOT EXISTS contexts_insert_guard BEFORE INSERT ON contexts
BEGIN
    SELECT morphz_upgraded_store_guard();
END;
