-- 0002_recall: the recall index (derived data: rebuildable from events and mind at any time).
-- Each context gets its own FTS5 table (named in recall_meta): rowid = event seq for events,
-- and a negative number for frame documents (a new one each time the frame's text changes).

ALTER TABLE events ADD COLUMN time_us INTEGER;  -- event time as UTC microseconds
UPDATE events SET time_us = CAST(round((julianday(time) - 2440587.5) * 86400000.0) AS INTEGER) * 1000;
CREATE INDEX events_time ON events (context_id, time_us, seq);
CREATE INDEX events_session ON events (context_id, session_id, seq);

CREATE TABLE recall_meta (
    context_id  TEXT PRIMARY KEY,
    fts_table   TEXT NOT NULL,        -- this context's FTS5 table
    indexed_seq INTEGER NOT NULL,     -- every event up to this seq went through the indexer
    frame_docs  INTEGER NOT NULL      -- frame documents handed out (their rowids are negative)
);

CREATE TABLE recall_frames (
    context_id TEXT NOT NULL,
    frame_id   TEXT NOT NULL,
    doc_id     INTEGER NOT NULL,      -- the frame's current rowid in the FTS table (< 0)
    key        INTEGER NOT NULL,      -- stable number of the frame in the index (> 0): kept
                                      -- across revisions and rebuilds, so cursors stay valid
    time_us    INTEGER NOT NULL,      -- time of the change that produced this document
    PRIMARY KEY (context_id, frame_id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX recall_frames_doc ON recall_frames (context_id, doc_id);
CREATE UNIQUE INDEX recall_frames_key ON recall_frames (context_id, key);
CREATE INDEX recall_frames_time ON recall_frames (context_id, time_us, key);

-- Reverse source lookup for frame traversal (which frames cite X).
CREATE TABLE frame_sources (
    context_id TEXT NOT NULL,
    source     TEXT NOT NULL,
    frame_id   TEXT NOT NULL,
    PRIMARY KEY (context_id, source, frame_id)
) WITHOUT ROWID;
INSERT INTO frame_sources
    SELECT f.context_id, j.value, f.frame_id
    FROM frames f, json_each('["' || replace(f.sources, ' ', '","') || '"]') j
    WHERE f.sources <> '';

-- Secrets of this store (the key that signs recall cursors).
CREATE TABLE store_secrets (
    name  TEXT PRIMARY KEY,
    value BLOB NOT NULL
);
INSERT INTO store_secrets VALUES ('cursor-key', randomblob(32));
