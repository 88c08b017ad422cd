-- 0012_frame_tokens_wide: the kept total of each context's frames in view (0009) counts a wide
-- character (CJK, kana, hangul, emoji) as one token, as the encoding's estimate does (it counted
-- four of them to a token), and it counts the relations whose subject is in view (it counted
-- none): a mind of CJK frames, or of many relations, could pass the critical level unrefused.
-- Recounted in Python right after this script, in the same transaction (store/sqlite.py,
-- _AFTER), with mind.lifecycle.frame_tokens.
DELETE FROM frame_tokens;
