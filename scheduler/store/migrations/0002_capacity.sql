-- Capacity: pools, offers, reservations, allocations, idempotency records and meters.
-- Portable SQL, as in 0001.

ALTER TABLE nodes ADD COLUMN pool_id TEXT;
ALTER TABLE nodes ADD COLUMN booking_version BIGINT NOT NULL DEFAULT 0;
CREATE INDEX nodes_pool ON nodes (pool_id);

CREATE TABLE pools (
    id         TEXT PRIMARY KEY,
    generation BIGINT NOT NULL,
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    site_id    TEXT NOT NULL,
    class      TEXT NOT NULL,
    policy     TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE pool_offers (
    pool_id   TEXT NOT NULL REFERENCES pools (id),
    tenant_id TEXT NOT NULL REFERENCES tenants (id),
    PRIMARY KEY (pool_id, tenant_id)
);

CREATE TABLE reservations (
    id              TEXT PRIMARY KEY,
    generation      BIGINT NOT NULL,
    tenant_id       TEXT NOT NULL REFERENCES tenants (id),
    pool_id         TEXT NOT NULL REFERENCES pools (id),
    state           TEXT NOT NULL,
    state_reason    TEXT,
    request         TEXT NOT NULL,
    start_at        BIGINT NOT NULL,
    end_at          BIGINT NOT NULL,
    bound_at        BIGINT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX reservations_tenant ON reservations (tenant_id);
CREATE INDEX reservations_state ON reservations (state);

CREATE TABLE allocations (
    id             TEXT PRIMARY KEY,
    reservation_id TEXT NOT NULL REFERENCES reservations (id),
    node_id        TEXT NOT NULL REFERENCES nodes (id),
    tenant_id      TEXT NOT NULL,
    start_at       BIGINT NOT NULL,
    end_at         BIGINT NOT NULL,
    live           BIGINT NOT NULL,
    created_at     BIGINT NOT NULL
);
CREATE INDEX allocations_node ON allocations (node_id, live);
CREATE INDEX allocations_reservation ON allocations (reservation_id);

CREATE TABLE idempotency (
    tenant_id    TEXT NOT NULL,
    key          TEXT NOT NULL,
    body_hash    TEXT NOT NULL,
    status       BIGINT NOT NULL,
    response     TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, key)
);

CREATE TABLE meters (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    reservation_id TEXT NOT NULL,
    meter          TEXT NOT NULL,
    window_start   BIGINT NOT NULL,
    window_end     BIGINT NOT NULL,
    quantity       DOUBLE PRECISION NOT NULL,
    created_at     BIGINT NOT NULL
);
CREATE INDEX meters_tenant ON meters (tenant_id, window_start);
