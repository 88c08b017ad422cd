-- 0011_event_time_offsets: the exact microseconds of event times whose UTC offset has seconds
-- (Python writes them for historical times: Europe/Amsterdam before 1937 is +00:19:32). SQLite's
-- date functions cannot read such an offset, so 0002 (julianday) and 0007 (strftime) set their
-- time_us to NULL, and the event fell out of every time-range search. The live path has always
-- stored them exactly. Recomputed in Python right after this script, in the same transaction
-- (store/sqlite.py, _AFTER): every event whose time_us is NULL or whose time has such an offset.
SELECT 1;
