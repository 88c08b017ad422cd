-- 0027_retired_sessions_by_sequence: the session directory names the most recently active
-- retired sessions in the order of the log (last_seq), as it ranks the other sessions, no
-- longer by the wall-clock time of their last event, which a step of the clock puts out of
-- order (review 18a). Partial: an append to an active session, nearly every write, changes no
-- entry of it.
CREATE INDEX IF NOT EXISTS sessions_retired_latest
    ON sessions (context_id, last_seq DESC, session_id) WHERE attention = 'retired';
