-- 0010_recall_escapes: the recall tokenizer drops terminal escape sequences (colour codes in
-- tool output: "\x1b[31mERROR\x1b[0m" now gives the token error, not 31merror) and reads
-- half-width katakana as full-width (ｶﾀｶﾅ finds カタカナ), and keeps combining marks inside
-- their words (a Hindi word is no longer split into letters). The index is derived data: marked
-- stale here, it is rebuilt by morphz.open, context by context, as after 0008.
UPDATE recall_meta SET indexed_seq = -1;
