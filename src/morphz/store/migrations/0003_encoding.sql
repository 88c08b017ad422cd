-- 0003_encoding: what the Context Encoding reads must not depend on the history's length.

-- Frames still in view (active and retiring), in projection order.
CREATE INDEX frames_visible ON frames (context_id, pos) WHERE lifecycle <> 'retired';

-- Per-context settings that are runtime facts, not mind state (token budget and model window).
CREATE TABLE context_settings (
    context_id TEXT NOT NULL,
    name       TEXT NOT NULL,
    value      TEXT NOT NULL,  -- JSON
    PRIMARY KEY (context_id, name)
) WITHOUT ROWID;
