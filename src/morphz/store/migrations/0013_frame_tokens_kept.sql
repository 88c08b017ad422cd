-- 0013_frame_tokens_kept: the kept total of each context's frames in view counts, since the
-- tenth session's last changes, the marks a retiring frame shows (lifecycle, remaining ticks,
-- its reason up to 200 characters) and wide characters in its sources. Stores that ran 0012
-- before those changes are recounted here, in Python right after this script, in the same
-- transaction (store/sqlite.py, _AFTER), with mind.lifecycle.kept_tokens and edge_tokens.
DELETE FROM frame_tokens;
