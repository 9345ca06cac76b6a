-- The boots the scheduler started (issue 31): a ramdisk token is handed out only for one of
-- these, once, to the first script request after the boot began; a second script request or a
-- second join during that boot is an alarm (node.boot.contested) that ends it. A row records
-- who started the boot (a workflow run, an operator, a lifecycle move), which task its token
-- was for, which client took it, and which address and key joined with it: the deployed OS's
-- join is checked against that address, and a deploy's plan and image go only to that key.
-- `seq` orders one node's boots (1, 2, ...; two arms racing on one node cannot take one
-- number). Times are milliseconds; portable SQL, as in 0001.
CREATE TABLE node_boots (
    id             TEXT PRIMARY KEY,
    node_id        TEXT NOT NULL REFERENCES nodes (id),
    seq            BIGINT NOT NULL,
    armed_by       TEXT NOT NULL,
    run_id         TEXT,
    armed_at       BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    task           TEXT,
    token_hash     TEXT,
    handed_at      BIGINT,
    handed_to      TEXT,
    joined_at      BIGINT,
    joined_from    TEXT,
    joined_key     TEXT,
    ended_at       BIGINT,
    ended          TEXT,
    contested_by   TEXT,
    contested_run  TEXT
);
CREATE UNIQUE INDEX node_boots_node ON node_boots (node_id, seq);
CREATE INDEX node_boots_token ON node_boots (token_hash);
CREATE INDEX node_boots_contested_run ON node_boots (contested_run);
