-- The lessee's serial console (issue 33): one writer at a time per node. A bridge renews its
-- session's heartbeat while it runs; a session not ended whose heartbeat is fresh holds the
-- console, and one whose process died with its scheduler (no end recorded) stops holding it
-- once its heartbeat is stale. Portable SQL, as in 0001.
ALTER TABLE console_sessions ADD COLUMN alive_at BIGINT;
