-- 0026_recall_subject_relations: a frame's recall document holds the relations it is the subject
-- of, no longer those it is the object of (a relate or unrelate rewrote the documents of both
-- ends, so a commit on a frame many frames relate to cost that frame's degree; DESIGN section
-- 4). The subject's document names the object, so a search for a frame's id still finds the
-- frames relating to it. The index is derived data: marked stale here, it is rebuilt by
-- morphz.open, context by context, as after 0008, 0010 and 0025.
UPDATE recall_meta SET indexed_seq = -1;
