-- Core tables. Portable SQL only: the same file runs on SQLite and PostgreSQL.
-- Times are BIGINT milliseconds since the Unix epoch (UTC); booleans are BIGINT 0/1;
-- structured fields are JSON text. Every mutable row has a generation for compare-and-set.

CREATE TABLE counters (
    name  TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO counters (name, value) VALUES ('events', 0);

CREATE TABLE tenants (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE credentials (
    id         TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    role       TEXT NOT NULL,
    tenant_id  TEXT REFERENCES tenants (id),
    name       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);

CREATE TABLE nodes (
    id                  TEXT PRIMARY KEY,
    generation          BIGINT NOT NULL,
    state               TEXT NOT NULL,
    failed_from         TEXT,
    state_reason        TEXT,
    owner               TEXT,
    deadline            BIGINT,
    power               TEXT NOT NULL,
    maintenance         BIGINT NOT NULL,
    cordoned            BIGINT NOT NULL,
    tenant_root         BIGINT NOT NULL,
    trust               TEXT NOT NULL,
    identity_generation BIGINT NOT NULL,
    boot_mac            TEXT UNIQUE,
    labels              TEXT NOT NULL,
    taints              TEXT NOT NULL,
    devices             TEXT NOT NULL,
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL
);
CREATE INDEX nodes_state ON nodes (state);
CREATE INDEX nodes_deadline ON nodes (deadline);

CREATE TABLE events (
    seq       BIGINT PRIMARY KEY,
    kind      TEXT NOT NULL,
    subject   TEXT NOT NULL,
    tenant_id TEXT,
    data      TEXT NOT NULL,
    at        BIGINT NOT NULL
);
