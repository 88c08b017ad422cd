BEGIN TRANSACTION;
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
INSERT INTO "activations" VALUES('context-default','act-49aa7e90b723','default',1,'running',5,NULL);
CREATE TABLE boundary_versions (
    context_id TEXT NOT NULL,
    boundary   TEXT NOT NULL,
    version    INTEGER NOT NULL,
    PRIMARY KEY (context_id, boundary)
) WITHOUT ROWID;
INSERT INTO "boundary_versions" VALUES('context-default','content:deployment/target-v1',1);
INSERT INTO "boundary_versions" VALUES('context-default','content:deployment/target-v2',2);
INSERT INTO "boundary_versions" VALUES('context-default','edge:deployment/target-v2 supersedes deployment/target-v1',2);
INSERT INTO "boundary_versions" VALUES('context-default','life:@e3',2);
INSERT INTO "boundary_versions" VALUES('context-default','life:deployment/target-v1',2);
INSERT INTO "boundary_versions" VALUES('context-default','life:deployment/target-v2',2);
CREATE TABLE checkpoint_edges (
    context_id TEXT NOT NULL,
    name       TEXT NOT NULL,
    subject    TEXT NOT NULL,
    relation   TEXT NOT NULL,
    object     TEXT NOT NULL,
    PRIMARY KEY (context_id, name, subject, relation, object)
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
CREATE TABLE checkpoints (
    context_id TEXT NOT NULL,
    name       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    PRIMARY KEY (context_id, name)
) WITHOUT ROWID;
CREATE TABLE context_settings (
    context_id TEXT NOT NULL,
    name       TEXT NOT NULL,
    value      TEXT NOT NULL,  -- JSON
    PRIMARY KEY (context_id, name)
) WITHOUT ROWID;
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
INSERT INTO "contexts" VALUES('context-default','2026-08-04T09:00:01+00:00',2,2,5,'874e800a376de9453cfe884f788105a787823351a4a533b4c38c7e8ce61dd111',8,8,2.0,0);
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
    head        TEXT NOT NULL, time_us INTEGER,
    UNIQUE (context_id, seq)
);
INSERT INTO "events" VALUES(1,'context-default',1,'user_message','default','2026-08-04T09:00:02+00:00','2026-08-04T09:00:02+00:00','Please prepare the deployment of the checkout service.',NULL,'{"tick":true}',0,1,'29cca18cee6941da6017fc2e33578432f762494b4d938c416b6202fe3427d8eb',1785834002000000);
INSERT INTO "events" VALUES(2,'context-default',2,'context_tx_committed','default','2026-08-04T09:00:03+00:00','2026-08-04T09:00:03+00:00','(context-tx (base-version 0) (derive deployment/target-v1 (from @e1) (fact (region cn-hangzhou))))',NULL,'{"base_version":0,"reason":null,"rebased":false,"tx_id":"tx-1"}',1,1,'abb5474e2fcc5073ffb317cc217f278eb90f1da7c78769a1a3f1229cd4768bda',1785834003000000);
INSERT INTO "events" VALUES(3,'context-default',3,'tool_result','ops','2026-08-04T09:00:04+00:00','2026-08-04T09:00:04+00:00','production.yaml: region: cn-shanghai',NULL,'{"tick":true}',1,2,'f27e51cd021d8a767bd19e80223268f3a801144d9f93529f3e4f91c075abfe9d',1785834004000000);
INSERT INTO "events" VALUES(4,'context-default',4,'context_tx_committed','default','2026-08-04T09:00:05+00:00','2026-08-04T09:00:05+00:00','(context-tx (base-version 1) (reason "newer evidence") (derive deployment/target-v2 (from @e3 deployment/target-v1) (fact (region cn-shanghai))) (relate deployment/target-v2 supersedes deployment/target-v1) (retire deployment/target-v1 @e3))',NULL,'{"base_version":1,"reason":"newer evidence","rebased":false,"tx_id":"tx-2"}',2,2,'874e800a376de9453cfe884f788105a787823351a4a533b4c38c7e8ce61dd111',1785834005000000);
INSERT INTO "events" VALUES(5,'context-default',5,'activation_started','default','2026-08-04T09:00:06+00:00','2026-08-04T09:00:06+00:00',NULL,NULL,'{"activation":"act-49aa7e90b723","root":"@e1"}',2,2,'874e800a376de9453cfe884f788105a787823351a4a533b4c38c7e8ce61dd111',1785834006000000);
CREATE TABLE frame_sources (
    context_id TEXT NOT NULL,
    source     TEXT NOT NULL,
    frame_id   TEXT NOT NULL,
    PRIMARY KEY (context_id, source, frame_id)
) WITHOUT ROWID;
INSERT INTO "frame_sources" VALUES('context-default','@e1','deployment/target-v1');
INSERT INTO "frame_sources" VALUES('context-default','@e3','deployment/target-v2');
INSERT INTO "frame_sources" VALUES('context-default','deployment/target-v1','deployment/target-v2');
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
INSERT INTO "frames" VALUES('context-default','deployment/target-v1','(fact (region cn-hangzhou))','@e1',1,'retired',0,1.0,NULL,'newer evidence');
INSERT INTO "frames" VALUES('context-default','deployment/target-v2','(fact (region cn-shanghai))','@e3 deployment/target-v1',1,'active',0,2.0,NULL,NULL);
CREATE TABLE observations (
    context_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    lifecycle  TEXT NOT NULL CHECK (lifecycle IN ('active', 'retired')),
    protected  INTEGER NOT NULL,
    chars      INTEGER NOT NULL,
    PRIMARY KEY (context_id, seq)
) WITHOUT ROWID;
INSERT INTO "observations" VALUES('context-default',1,'user_message','active',0,54);
INSERT INTO "observations" VALUES('context-default',3,'tool_result','retired',0,36);
CREATE TABLE recall_frames (
    context_id TEXT NOT NULL,
    frame_id   TEXT NOT NULL,
    doc_id     INTEGER NOT NULL,      -- the frame's current rowid in the FTS table (< 0)
    key        INTEGER NOT NULL,      -- stable number of the frame in the index (> 0): kept
                                      -- across revisions and rebuilds, so cursors stay valid
    time_us    INTEGER NOT NULL,      -- time of the change that produced this document
    PRIMARY KEY (context_id, frame_id)
) WITHOUT ROWID;
INSERT INTO "recall_frames" VALUES('context-default','deployment/target-v1',-2,1,1785834005000000);
INSERT INTO "recall_frames" VALUES('context-default','deployment/target-v2',-3,3,1785834005000000);
CREATE TABLE recall_meta (
    context_id  TEXT PRIMARY KEY,
    fts_table   TEXT NOT NULL,        -- this context's FTS5 table
    indexed_seq INTEGER NOT NULL,     -- every event up to this seq went through the indexer
    frame_docs  INTEGER NOT NULL      -- frame documents handed out (their rowids are negative)
);
INSERT INTO "recall_meta" VALUES('context-default','recall_fts_1',5,3);
CREATE TABLE relations (
    context_id TEXT NOT NULL,
    subject    TEXT NOT NULL,
    relation   TEXT NOT NULL,
    object     TEXT NOT NULL,
    PRIMARY KEY (context_id, subject, relation, object)
) WITHOUT ROWID;
INSERT INTO "relations" VALUES('context-default','deployment/target-v2','supersedes','deployment/target-v1');
CREATE TABLE schema_migrations (number INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL);
INSERT INTO "schema_migrations" VALUES(1,'0001_core','2026-11-30 07:15:43');
INSERT INTO "schema_migrations" VALUES(2,'0002_recall','2026-11-30 07:15:43');
INSERT INTO "schema_migrations" VALUES(3,'0003_encoding','2026-11-30 07:15:43');
CREATE TABLE sessions (
    context_id  TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    attention   TEXT NOT NULL CHECK (attention IN ('active', 'retired')),
    created_seq INTEGER NOT NULL,
    last_seq    INTEGER NOT NULL,
    last_time   TEXT NOT NULL,
    PRIMARY KEY (context_id, session_id)
) WITHOUT ROWID;
INSERT INTO "sessions" VALUES('context-default','default','active',1,5,'2026-08-04T09:00:06+00:00');
INSERT INTO "sessions" VALUES('context-default','ops','active',3,3,'2026-08-04T09:00:04+00:00');
CREATE TABLE store_secrets (
    name  TEXT PRIMARY KEY,
    value BLOB NOT NULL
);
INSERT INTO "store_secrets" VALUES('cursor-key',X'526C09EF7BFE0E2B2EA32871A15234926DF098143B5A62857728F66281939034');
CREATE INDEX frames_retiring ON frames (context_id, deadline) WHERE lifecycle = 'retiring';
CREATE INDEX relations_object ON relations (context_id, object);
CREATE INDEX observations_active ON observations (context_id, seq) WHERE lifecycle = 'active';
CREATE INDEX activations_running ON activations (context_id, session_id) WHERE state = 'running';
CREATE INDEX events_time ON events (context_id, time_us, seq);
CREATE INDEX events_session ON events (context_id, session_id, seq);
CREATE UNIQUE INDEX recall_frames_doc ON recall_frames (context_id, doc_id);
CREATE UNIQUE INDEX recall_frames_key ON recall_frames (context_id, key);
CREATE INDEX recall_frames_time ON recall_frames (context_id, time_us, key);
CREATE INDEX frames_visible ON frames (context_id, pos) WHERE lifecycle <> 'retired';
CREATE VIRTUAL TABLE recall_fts_1 USING fts5(body, near, tokenize = 'unicode61 remove_diacritics 2');
INSERT INTO recall_fts_1(rowid, body, near) VALUES (-3, 'deploy target v2 fact region cn shanghai supersed deploy target v1', '');
INSERT INTO recall_fts_1(rowid, body, near) VALUES (-2, 'deploy target v1 fact region cn hangzhou supersed deploy target v2', '');
INSERT INTO recall_fts_1(rowid, body, near) VALUES (1, 'pleas prepar deploy checkout servic', '');
INSERT INTO recall_fts_1(rowid, body, near) VALUES (3, 'product yaml region cn shanghai', '');
INSERT INTO recall_fts_1(rowid, body, near) VALUES (4, 'newer evid', '');
COMMIT;
