-- 0015_frame_tokens_quoted: a retiring frame's reason is shown quoted, each " and \ of it
-- escaped as two characters, and the kept total now counts it so (review 11): stores are
-- recounted here, in Python right after this script, in the same transaction (store/sqlite.py,
-- _AFTER), with mind.lifecycle.kept_tokens and edge_tokens.
DELETE FROM frame_tokens;
