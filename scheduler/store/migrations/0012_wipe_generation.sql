-- Which release an accepted wipe report belongs to: the node's row generation when it was
-- received (every lifecycle move bumps it). The boot service hands a releasing node an erase
-- only until one is accepted at its current generation, so a ramdisk that reboots after its
-- erase is not erased again with a report that would arrive stale. Portable SQL, as in 0001.
ALTER TABLE wipe_reports ADD COLUMN node_generation BIGINT;
