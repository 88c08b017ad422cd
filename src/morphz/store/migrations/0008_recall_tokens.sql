-- 0008_recall_tokens: the recall tokenizer composes words typed with combining marks and folds
-- diacritics before stemming (résumé and resume now give the same token). The index is derived
-- data: morphz.open rebuilds it, for every context, when it applies this migration. Nothing in
-- the schema changes.
SELECT 1;
