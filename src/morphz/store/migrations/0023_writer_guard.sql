-- 0023_writer_guard: a process of a Morphz older than this migration, still running while a
-- newer one upgrades the store, cannot write to it any more. Morphz checks the schema before
-- each write only since the thirteenth session; an older process went on committing by its old
-- rules (counting tokens as the store no longer does, saving calibrations 0021 dropped). Every
-- event write runs this trigger, and the function it calls is registered only on the writer
-- connections of a Morphz that knows this migration (store/sqlite_migrations.py,
-- writer_guard): SQLite prepares an older process's statements again after the schema
-- changed, and refuses them with "no such function: morphz_upgraded_store_guard".
CREATE TRIGGER IF NOT EXISTS events_writer_guard BEFORE INSERT ON events
BEGIN
    SELECT morphz_upgraded_store_guard();
END;
