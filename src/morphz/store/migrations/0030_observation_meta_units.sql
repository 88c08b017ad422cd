-- 0030_observation_meta_units: an observation's units (its whole inbox entry's token estimate,
-- 0029) now count the entry's meta too, as the inbox shows it (a tool result's tool, call and
-- error: about a third of a short tool result's entry, which receipts left out: review 22).
-- Counted in Python right after this script, in the same transaction (store/sqlite_migrations.py,
-- AFTER); nothing else changes.
SELECT 1;
