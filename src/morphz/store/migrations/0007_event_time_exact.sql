-- 0007_event_time_exact: exact microseconds for the event times 0002 converted. 0002 derived
-- time_us from julianday(), which rounds to the millisecond, so an event at 00:00:00.9996
-- counted as 00:00:01 in time-range searches. Event times are ISO text with six fraction digits
-- when they have any: the whole seconds come from the text without its fraction (offset kept),
-- the microseconds from the digits.
UPDATE events
SET time_us = CAST(strftime('%s', substr(time, 1, 19) || substr(time, 27)) AS INTEGER) * 1000000
    + CAST(substr(time, 21, 6) AS INTEGER)
WHERE substr(time, 20, 1) = '.' AND time_us % 1000 = 0;
