-- The boot service: one-time ramdisk tokens, the platform inventory a commissioning report
-- stored, every wipe report received (accepted or refused, with its reason) and the deploy
-- plan a deploying ramdisk fetches.

CREATE TABLE boot_tokens (
    token_hash          TEXT PRIMARY KEY,
    node_id             TEXT NOT NULL REFERENCES nodes (id),
    task                TEXT NOT NULL,
    identity_generation BIGINT NOT NULL,
    created_at          BIGINT NOT NULL,
    expires_at          BIGINT NOT NULL,
    used_at             BIGINT
);
CREATE INDEX boot_tokens_node ON boot_tokens (node_id);

CREATE TABLE node_inventories (
    node_id     TEXT PRIMARY KEY REFERENCES nodes (id),
    passed      BIGINT NOT NULL,
    inventory   TEXT NOT NULL,
    envelope    TEXT NOT NULL,
    reported_at BIGINT NOT NULL
);

CREATE TABLE wipe_reports (
    id          TEXT PRIMARY KEY,
    node_id     TEXT NOT NULL REFERENCES nodes (id),
    accepted    BIGINT NOT NULL,
    code        TEXT,
    reason      TEXT,
    signer      TEXT,
    envelope    TEXT NOT NULL,
    received_at BIGINT NOT NULL
);
CREATE INDEX wipe_reports_node ON wipe_reports (node_id, received_at);

CREATE TABLE deploy_plans (
    node_id    TEXT PRIMARY KEY REFERENCES nodes (id),
    plan       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
