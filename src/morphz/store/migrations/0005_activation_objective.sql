-- 0005_activation_objective: what a running activation is working on, so the kernel can show
-- every running activation with its objective (not only the current one). Rows written before
-- this migration keep a NULL objective; the kernel then shows the root request's ref.
ALTER TABLE activations ADD COLUMN objective TEXT;
