-- 0016_recall_unspaced_scripts: the recall tokenizer cuts Thai, Lao, Myanmar and Khmer runs into
-- bigrams, as it cuts CJK runs (these scripts have no spaces between words: a whole sentence was
-- one token, and a word inside it could not be found). The index is derived data: marked stale
-- here, it is rebuilt by morphz.open, context by context, as after 0008 and 0010.
UPDATE recall_meta SET indexed_seq = -1;
