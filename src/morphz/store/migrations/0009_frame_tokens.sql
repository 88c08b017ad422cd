-- 0009_frame_tokens: the estimated tokens of each context's frames in view (active and
-- retiring), kept so that a commit can refuse, in constant time, a transaction that would leave
-- a mind no request can carry (the `budget` refusal). Each frame counts as
-- mind.lifecycle.frame_tokens does: (len(id) + len(body) + len(sources) + one separator per
-- source + 32 + 3) / 4. write_changes keeps the total from the frames it writes; the audit
-- checks it against the replayed mind.
CREATE TABLE frame_tokens (
    context_id TEXT NOT NULL PRIMARY KEY,
    n          INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO frame_tokens (context_id, n)
SELECT context_id,
       sum((length(frame_id) + length(body) + length(sources) + (sources <> '') + 35) / 4)
FROM frames WHERE lifecycle <> 'retired' GROUP BY context_id;
