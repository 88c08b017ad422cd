-- 0006_session_window: the session directory's working set without reading every session of
-- the context. sessions_recent finds the sessions last active inside the time window by a range
-- of an index (last_time is the UTC ISO time the store writes, so text order is time order);
-- session_counts keeps how many sessions each context has per attention, so what the directory
-- leaves out is counted without a scan. Triggers keep the counts, so every path that writes
-- sessions (appends, transactions, replays) keeps them exact; an append changes last_time only,
-- which fires none of them.
CREATE INDEX sessions_recent ON sessions (context_id, attention, last_time);

CREATE TABLE session_counts (
    context_id TEXT NOT NULL,
    attention  TEXT NOT NULL,
    n          INTEGER NOT NULL,
    PRIMARY KEY (context_id, attention)
) WITHOUT ROWID;

INSERT INTO session_counts (context_id, attention, n)
SELECT context_id, attention, count(*) FROM sessions GROUP BY context_id, attention;

CREATE TRIGGER session_counts_insert AFTER INSERT ON sessions
BEGIN
    INSERT INTO session_counts (context_id, attention, n) VALUES (new.context_id, new.attention, 1)
    ON CONFLICT (context_id, attention) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER session_counts_delete AFTER DELETE ON sessions
BEGIN
    UPDATE session_counts SET n = n - 1
    WHERE context_id = old.context_id AND attention = old.attention;
END;

CREATE TRIGGER session_counts_update AFTER UPDATE OF context_id, attention ON sessions
WHEN old.context_id IS NOT new.context_id OR old.attention IS NOT new.attention
BEGIN
    UPDATE session_counts SET n = n - 1
    WHERE context_id = old.context_id AND attention = old.attention;
    INSERT INTO session_counts (context_id, attention, n) VALUES (new.context_id, new.attention, 1)
    ON CONFLICT (context_id, attention) DO UPDATE SET n = n + 1;
END;
