-- 0025_recall_folding_and_sources: the recall tokenizer case-folds (Straße reads as strasse, the
-- ligature ﬁ as fi) and spells the letters that do not decompose in ASCII (ø o, ł l, æ ae, þ th,
-- dotless ı i...), so København is found as kobenhavn; and a frame's document holds its sources
-- (a search for @e12 among frames finds the frames derived from it). The index is derived data:
-- marked stale here, it is rebuilt by morphz.open, context by context, as after 0008 and 0010.
UPDATE recall_meta SET indexed_seq = -1;
