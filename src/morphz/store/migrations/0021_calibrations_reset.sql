-- 0021_calibrations_reset: a model's calibration (`calibration:<model>` in context_settings) is a
-- ratio of the tokens a provider reported to the estimate, learnt against the estimate before
-- 0020 (fourteenth session), which counted a character that is neither ASCII nor wide a quarter
-- of a token. Kept, it scales the new, larger estimate of such text a second time: a context in
-- Cyrillic or Thai could refuse every activation before sending (so no report ever corrected it).
-- The rows are dropped: each model starts uncalibrated, as a new context does, and learns again
-- from its first report. (GLOB, unlike LIKE, is case-sensitive: only Morphz's setting names.)
DELETE FROM context_settings WHERE name GLOB 'calibration:*';
