-- Serial console sessions, for audit: who opened which node's console, when it ended, and
-- how many bytes went each way.

CREATE TABLE console_sessions (
    id            TEXT PRIMARY KEY,
    node_id       TEXT NOT NULL REFERENCES nodes (id),
    credential_id TEXT NOT NULL,
    started_at    BIGINT NOT NULL,
    ended_at      BIGINT,
    bytes_in      BIGINT NOT NULL,
    bytes_out     BIGINT NOT NULL
);
CREATE INDEX console_sessions_node ON console_sessions (node_id);
