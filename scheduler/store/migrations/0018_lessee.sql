-- The lessee's hands (issue 33). Portable SQL, as in 0001.
--
-- The serial console, one writer at a time per node: a bridge renews its session's
-- heartbeat while it runs; a session not ended whose heartbeat is fresh holds the console,
-- and one whose process died with its scheduler (no end recorded) stops holding it once its
-- heartbeat is stale.
ALTER TABLE console_sessions ADD COLUMN alive_at BIGINT;

-- The SSH keys a tenant registered for the console gateway (a JSON array of OpenSSH public
-- key lines), beside those of its leases' profiles.
ALTER TABLE tenants ADD COLUMN ssh_keys TEXT;
