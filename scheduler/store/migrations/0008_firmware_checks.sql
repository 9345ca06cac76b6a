-- The teardown's in-band firmware check: what a releasing node's ramdisk reported, compared
-- with its pool's firmware baseline. A compliant check at the node's current generation lets
-- the boot service move on to the erase.

CREATE TABLE firmware_checks (
    id              TEXT PRIMARY KEY,
    node_id         TEXT NOT NULL REFERENCES nodes (id),
    node_generation BIGINT NOT NULL,
    compliant       BIGINT NOT NULL,
    report          TEXT NOT NULL,
    received_at     BIGINT NOT NULL
);
CREATE INDEX firmware_checks_node ON firmware_checks (node_id, node_generation);
