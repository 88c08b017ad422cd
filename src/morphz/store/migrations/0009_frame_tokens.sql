-- 0009_frame_tokens: the estimated tokens of each context's frames in view (active and
-- retiring), kept so that a commit can refuse, in constant time, a transaction that would leave
-- a mind no request can carry (the `budget` refusal). Each frame counts as
-- mind.lifecycle.frame_tokens does. write_changes keeps the total from the frames it writes; the
-- audit checks it against the replayed mind. The existing frames are counted in Python right
-- after this script, in the same transaction (store/sqlite.py, _AFTER): SQLite's length() stops
-- at a NUL, which a frame body may hold.
CREATE TABLE frame_tokens (
    context_id TEXT NOT NULL PRIMARY KEY,
    n          INTEGER NOT NULL
) WITHOUT ROWID;
