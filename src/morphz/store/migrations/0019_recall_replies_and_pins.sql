-- 0019_recall_replies_and_pins: two reads of the recall index.
-- A model reply that was delivered is searched with the lifecycle of the agent_reply observation
-- that copies it (its meta names the reply: {"reply": "@e42"}), so a reply the agent retired is
-- found as retired. This index finds that observation from the reply's ref.
CREATE INDEX IF NOT EXISTS events_reply ON events (context_id, json_extract(meta, '$.reply'))
    WHERE kind = 'agent_reply' AND json_valid(meta);
-- The time of each frame document: a chronological walk places a frame at the time of the
-- document it had when the walk's first page pinned its evidence set, so a frame revised
-- between pages is neither skipped nor returned twice. Derived data, as the index is: filled
-- here from the current documents, rewritten by a rebuild.
CREATE TABLE IF NOT EXISTS recall_frame_times (
    context_id TEXT NOT NULL,
    key        INTEGER NOT NULL,      -- the frame's key (recall_frames.key)
    doc        INTEGER NOT NULL,      -- the document's number (minus its FTS rowid)
    time_us    INTEGER NOT NULL,      -- time of the change that produced the document
    PRIMARY KEY (context_id, key, doc)
) WITHOUT ROWID;
INSERT OR IGNORE INTO recall_frame_times SELECT context_id, key, -doc_id, time_us FROM recall_frames;
