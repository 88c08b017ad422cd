-- 0018_recall_builders: the process filling each building table of a recall rebuild (host,
-- pid and start identity, as activations record theirs: morphz/owners.py). A rebuild killed
-- before its swap left its table (an FTS5 table and its shadow tables, up to a whole index)
-- for good, since a concurrent rebuild's table could not be told from it; now each rebuild
-- drops the tables of rebuilds whose process provably died (store/sqlite_builders.py). The
-- building tables rebuilds left before this migration are dropped by its Python step.
CREATE TABLE IF NOT EXISTS recall_builders (
    fts_table  TEXT PRIMARY KEY,      -- recall_fts_<n>_rebuild_<random>
    context_id TEXT NOT NULL,
    host       TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    started    TEXT                   -- start identity; NULL where the platform has none
) WITHOUT ROWID;
