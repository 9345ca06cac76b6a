-- Event retention (issue 35). Portable SQL, as in 0001.
--
-- Events older than `event-retention` are pruned oldest first; `events_pruned` is the
-- sequence number of the last one pruned, so a client resuming after an older one is told
-- that it missed events (410) instead of silently skipping them.
INSERT INTO counters (name, value) VALUES ('events_pruned', 0);
