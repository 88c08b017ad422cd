-- 0020_frame_tokens_bytes: the token estimate counts a character that is neither ASCII nor wide
-- (Latin accents, Greek, Cyrillic, Hebrew, Arabic, Indic, Thai...) a third of a token per UTF-8
-- byte, not a quarter of a token (fourteenth session): stores are recounted here, in Python right
-- after this script, in the same transaction (store/sqlite_migrations.py, AFTER), with
-- mind.lifecycle.kept_tokens and edge_tokens.
DELETE FROM frame_tokens;
