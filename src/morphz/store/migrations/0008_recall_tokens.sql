-- 0008_recall_tokens: the recall tokenizer composes words typed with combining marks and folds
-- diacritics before stemming (résumé and resume now give the same token). The index is derived
-- data: marked stale here, it is rebuilt by morphz.open, context by context, and stays marked
-- until its rebuild completes (an interrupted upgrade finishes at the next open).
UPDATE recall_meta SET indexed_seq = -1;
