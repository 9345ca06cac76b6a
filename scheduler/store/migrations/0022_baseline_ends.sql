-- Baselines retired or revoked by hand (issue 32). Portable SQL, as in 0001.
--
-- A baseline leaves `active` when another replaces it (obsolete), when an operator retires
-- it (the key has none until one is learned or approved again), or when an operator revokes
-- it (its measurements are known bad: never passed or learned again, whatever its state
-- was). state_reason says who ended it and why; replaced_at says when.
ALTER TABLE boot_baselines ADD COLUMN state_reason TEXT;
