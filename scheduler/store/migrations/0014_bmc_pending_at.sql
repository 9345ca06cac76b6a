-- Who holds the pending slot (a teardown run's id, or "api" for an operator's rotation) and
-- when that rotation began (milliseconds). An operator's rotation claims the slot and holds
-- it for a lease, so two rotations of one BMC never run at once, and a teardown waits for
-- one in flight instead of dropping its secret; a slot held past its lease was left by a
-- rotation that died and is settled (the pending secret promoted when it logs in, else
-- dropped) before it is claimed again. Portable SQL, as in 0001.
ALTER TABLE bmcs ADD COLUMN pending_by TEXT;
ALTER TABLE bmcs ADD COLUMN pending_at BIGINT;
