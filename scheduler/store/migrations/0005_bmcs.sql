-- BMCs: how to reach each node's BMC. `secret` is 'enc:v1:<nonce>:<ciphertext>' (sealed
-- under METAL_MASTER_KEY with the node id as associated data) or 'plain:<password>' when no
-- key is configured. `tls` is JSON: {"mode": "ca"|"fingerprint"|"insecure", "value": ...}.

CREATE TABLE bmcs (
    node_id    TEXT PRIMARY KEY REFERENCES nodes (id),
    generation BIGINT NOT NULL,
    protocol   TEXT NOT NULL,
    address    TEXT NOT NULL,
    username   TEXT NOT NULL,
    secret     TEXT NOT NULL,
    tls        TEXT NOT NULL,
    system_id  TEXT,
    privilege  TEXT,
    health     TEXT,
    updated_at BIGINT NOT NULL
);
