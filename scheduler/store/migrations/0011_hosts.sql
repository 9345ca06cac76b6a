-- Joining (seed 004's last step): single-use enrolment tokens a deploy hands the OS it writes,
-- the host record a joined OS becomes, and the join log of each node (every step of every
-- join, refusals included). Portable SQL, as in 0001.

-- Only the token's SHA-256 is kept. Bound to the node and its identity generation; `setup`
-- is the JSON of the networks and storage pools the host sets up after it joins; `origin`
-- is `deploy` (put in a deploy's seed) or `operator` (issued for a machine that already has
-- an OS: `metalctl host add`, the offline bundle).
CREATE TABLE enrolment_tokens (
    token_hash          TEXT PRIMARY KEY,
    id                  TEXT NOT NULL UNIQUE,
    node_id             TEXT NOT NULL REFERENCES nodes (id),
    identity_generation BIGINT NOT NULL,
    profile_id          TEXT,
    profile_version     BIGINT,
    setup               TEXT NOT NULL,
    origin              TEXT NOT NULL,
    created_at          BIGINT NOT NULL,
    expires_at          BIGINT NOT NULL,
    used_at             BIGINT,
    -- Set when the token expired unused and that was logged (the host never joined).
    lapsed_at           BIGINT
);
CREATE INDEX enrolment_tokens_node ON enrolment_tokens (node_id);
CREATE INDEX enrolment_tokens_lapsing ON enrolment_tokens (expires_at) WHERE used_at IS NULL AND lapsed_at IS NULL;

-- One host per node: the OS that joined with the node's current identity generation.
-- `state`: joining (certificate issued, setup not reported yet), joined, failed (its setup
-- was refused: the host is left out).
CREATE TABLE hosts (
    node_id                TEXT PRIMARY KEY REFERENCES nodes (id),
    state                  TEXT NOT NULL,
    role                   TEXT NOT NULL,
    identity_generation    BIGINT NOT NULL,
    hostname               TEXT NOT NULL,
    site                   TEXT NOT NULL,
    rack                   TEXT,
    tags                   TEXT NOT NULL,
    profile_id             TEXT,
    profile_version        BIGINT,
    enrolment_token        TEXT NOT NULL,
    setup                  TEXT NOT NULL,
    -- The Ed25519 key (base64) the host's current certificate certifies: only that key's
    -- certificate speaks for the host (a re-join or a renewal replaces it).
    public_key             TEXT NOT NULL,
    certificate_expires_at BIGINT NOT NULL,
    joined_at              BIGINT NOT NULL,
    renewed_at             BIGINT,
    generation             BIGINT NOT NULL,
    updated_at             BIGINT NOT NULL
);

-- Every step of every join of a node, in order (`seq` counts per node).
CREATE TABLE host_join_log (
    node_id             TEXT NOT NULL REFERENCES nodes (id),
    seq                 BIGINT NOT NULL,
    identity_generation BIGINT NOT NULL,
    at                  BIGINT NOT NULL,
    step                TEXT NOT NULL,
    ok                  BIGINT NOT NULL,
    detail              TEXT NOT NULL,
    PRIMARY KEY (node_id, seq)
);
