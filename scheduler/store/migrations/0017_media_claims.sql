-- Virtual-media boots (issue 31): a boot the teardown starts by mounting a per-boot ISO on the
-- node's BMC carries a claim (a random secret; only its SHA-256 is kept). The ISO, served at a
-- URL holding the claim, chains to /boot/ipxe?claim=, so that boot is taken by its claim and
-- never by a request naming the node's MAC. A boot armed for the next task of the same
-- ramdisk session (the erase after the in-band firmware check) carries the claim on, as the
-- ISO stays mounted. Portable SQL, as in 0001.
ALTER TABLE node_boots ADD COLUMN claim_hash TEXT;
CREATE INDEX node_boots_claim ON node_boots (claim_hash);
