-- 0028_staged_results: the outcome of each tool call, written as the call ends, until the write
-- that records the step's results as one batch deletes it (in that same transaction: an outcome
-- is either staged or an event, never both, never neither). A process killed before that batch
-- (SIGKILL, the OOM killer, a power cut) leaves the outcomes of the calls that ended here, and
-- the write that ends the activation (recovery, or its own end) records them as its results
-- and deletes them. Runtime state, not history: no event, never replayed; the audit reports a
-- row of an activation that has ended (the write that ended it should have recorded it).
-- reply_seq is the model_reply that asked for the call and position its index among that
-- reply's calls (call ids are unique only within one reply, and a server may repeat one).
-- kind, text and meta are the observation the batch records; ticks says whether it would tick
-- the cognitive clock (the result of a tool that ran, errors included).
CREATE TABLE IF NOT EXISTS staged_results (
    context_id    TEXT NOT NULL,
    activation_id TEXT NOT NULL,
    reply_seq     INTEGER NOT NULL,
    position      INTEGER NOT NULL,
    kind          TEXT NOT NULL,
    text          TEXT NOT NULL,
    meta          TEXT NOT NULL,
    ticks         INTEGER NOT NULL CHECK (ticks IN (0, 1)),
    PRIMARY KEY (context_id, activation_id, reply_seq, position)
) WITHOUT ROWID;
