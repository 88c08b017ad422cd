-- 0004_activation_owner: the process that runs an activation, so an activation whose process
-- died can be told from one another live process is running (morphz.owners). Rows written
-- before this migration keep a NULL owner.
ALTER TABLE activations ADD COLUMN owner_host TEXT;     -- host name
ALTER TABLE activations ADD COLUMN owner_pid INTEGER;   -- process id on that host
ALTER TABLE activations ADD COLUMN owner_started TEXT;  -- start identity (boot id:start time)
