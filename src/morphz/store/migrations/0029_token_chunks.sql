-- 0029_token_chunks: the token estimate counts each line of the encoding as at least the chunks
-- the pre-tokenizer of o200k and cl100k cuts it into, a token each (review 21b): numbers, JSON,
-- hex, base64, logs and the encoding's own S-expressions count one to four times what four
-- characters a token gave them. Each observation's units (now its whole inbox entry's, framing
-- stood in: mind.lines.observation_units) and each context's kept total of the frames in view
-- are counted again by the new rule, in Python right after this script, in the same transaction
-- (store/sqlite_migrations.py, AFTER). Calibrations learnt against the old estimate would scale
-- the new, larger estimate of such text a second time (as 0021 found after 0020), so they are
-- dropped: each model learns again from its first report.
DELETE FROM frame_tokens;
DELETE FROM context_settings WHERE name GLOB 'calibration:*';
