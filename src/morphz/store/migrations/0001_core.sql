-- 0001_core: contexts, events, the row-wise mind projection, sessions and activations.
-- Every table is keyed by context_id first so contexts can be distributed by that key.

CREATE TABLE contexts (
    context_id     TEXT PRIMARY KEY,
    created_at     TEXT NOT NULL,
    version        INTEGER NOT NULL DEFAULT 0,   -- mind version: +1 per committed tx
    clock          INTEGER NOT NULL DEFAULT 0,   -- cognitive clock
    last_seq       INTEGER NOT NULL DEFAULT 0,   -- last event seq
    head           TEXT NOT NULL,                -- projection head hash
    window         INTEGER NOT NULL,             -- organizing window (ticks)
    initial_window INTEGER NOT NULL,             -- window at creation (replay starts here)
    order_max      REAL NOT NULL DEFAULT 0,      -- largest frame order key handed out
    barrier        INTEGER NOT NULL DEFAULT 0    -- version of the last rollback
);

CREATE TABLE events (
    id          INTEGER PRIMARY KEY,
    context_id  TEXT NOT NULL REFERENCES contexts(context_id),
    seq         INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    time        TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    text        TEXT,
    meta        TEXT,
    payload     TEXT,
    version     INTEGER NOT NULL,
    clock       INTEGER NOT NULL,
    head        TEXT NOT NULL,
    UNIQUE (context_id, seq)
);

CREATE TABLE frames (
    context_id TEXT NOT NULL,
    frame_id   TEXT NOT NULL,
    body       TEXT NOT NULL,
    sources    TEXT NOT NULL,          -- space-separated frame ids and @e refs
    revision   INTEGER NOT NULL,
    lifecycle  TEXT NOT NULL CHECK (lifecycle IN ('active', 'retiring', 'retired')),
    protected  INTEGER NOT NULL,
    pos        REAL NOT NULL,
    deadline   INTEGER,
    reason     TEXT,
    PRIMARY KEY (context_id, frame_id)
) WITHOUT ROWID;
CREATE INDEX frames_retiring ON frames (context_id, deadline) WHERE lifecycle = 'retiring';

CREATE TABLE relations (
    context_id TEXT NOT NULL,
    subject    TEXT NOT NULL,
    relation   TEXT NOT NULL,
    object     TEXT NOT NULL,
    PRIMARY KEY (context_id, subject, relation, object)
) WITHOUT ROWID;
CREATE INDEX relations_object ON relations (context_id, object);

CREATE TABLE observations (
    context_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    lifecycle  TEXT NOT NULL CHECK (lifecycle IN ('active', 'retired')),
    protected  INTEGER NOT NULL,
    chars      INTEGER NOT NULL,
    PRIMARY KEY (context_id, seq)
) WITHOUT ROWID;
CREATE INDEX observations_active ON observations (context_id, seq) WHERE lifecycle = 'active';

CREATE TABLE sessions (
    context_id  TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    attention   TEXT NOT NULL CHECK (attention IN ('active', 'retired')),
    created_seq INTEGER NOT NULL,
    last_seq    INTEGER NOT NULL,
    last_time   TEXT NOT NULL,
    PRIMARY KEY (context_id, session_id)
) WITHOUT ROWID;

CREATE TABLE checkpoints (
    context_id TEXT NOT NULL,
    name       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    PRIMARY KEY (context_id, name)
) WITHOUT ROWID;

CREATE TABLE checkpoint_frames (
    context_id TEXT NOT NULL,
    name       TEXT NOT NULL,
    frame_id   TEXT NOT NULL,
    body       TEXT NOT NULL,
    sources    TEXT NOT NULL,
    revision   INTEGER NOT NULL,
    lifecycle  TEXT NOT NULL,
    protected  INTEGER NOT NULL,
    pos        REAL NOT NULL,
    deadline   INTEGER,
    reason     TEXT,
    PRIMARY KEY (context_id, name, frame_id)
) WITHOUT ROWID;

CREATE TABLE checkpoint_edges (
    context_id TEXT NOT NULL,
    name       TEXT NOT NULL,
    subject    TEXT NOT NULL,
    relation   TEXT NOT NULL,
    object     TEXT NOT NULL,
    PRIMARY KEY (context_id, name, subject, relation, object)
) WITHOUT ROWID;

-- The last mind version that changed each conflict boundary (DESIGN §6).
CREATE TABLE boundary_versions (
    context_id TEXT NOT NULL,
    boundary   TEXT NOT NULL,
    version    INTEGER NOT NULL,
    PRIMARY KEY (context_id, boundary)
) WITHOUT ROWID;

-- Running work per session: the runtime starts and finishes activations; a running
-- activation's root request is causally protected.
CREATE TABLE activations (
    context_id    TEXT NOT NULL,
    activation_id TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    root_seq      INTEGER,
    state         TEXT NOT NULL CHECK (state IN ('running', 'delivered', 'failed', 'interrupted')),
    started_seq   INTEGER NOT NULL,
    finished_seq  INTEGER,
    PRIMARY KEY (context_id, activation_id)
) WITHOUT ROWID;
CREATE INDEX activations_running ON activations (context_id, session_id) WHERE state = 'running';
