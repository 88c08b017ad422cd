-- 0014_order_index: neighbour reads instead of whole-history reads. frames_order serves the
-- frame just before or after a place in projection order (pos, then id; retired frames keep
-- their place), so a `place` reads the frames around its target, not every frame the context
-- ever had. activations_started serves the latest activations (`morphz context requests
-- --last N`) without reading and sorting every activation.
CREATE INDEX IF NOT EXISTS frames_order ON frames (context_id, pos, frame_id);
CREATE INDEX IF NOT EXISTS activations_started ON activations (context_id, started_seq);
