-- Reading one subject's events (a node's timeline, a reservation's) and one tenant's (every
-- tenant member's read) without scanning the whole log: GET /v1/events?subject= and the
-- tenant scope of every events read. Portable SQL, as in 0001.
CREATE INDEX events_subject ON events (subject, seq);
CREATE INDEX events_tenant ON events (tenant_id, seq);
