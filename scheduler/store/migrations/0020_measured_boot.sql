-- Measured boot (issue 32). Portable SQL, as in 0001.
--
-- node_tpms: the TPM a node's first attestation registered, pinned by its EK: every later
-- attestation must come from the same EK. ek_public and ek_certificate are base64.
CREATE TABLE node_tpms (
    node_id        TEXT PRIMARY KEY REFERENCES nodes (id),
    ek_sha256      TEXT NOT NULL,
    ek_public      TEXT NOT NULL,
    ek_certificate TEXT,
    first_seen     BIGINT NOT NULL
);

-- attest_challenges: one-time challenges. extra_data is the hex the quote must bind (a
-- digest of the nonce, the credential's secret and the ramdisk's key); the secret itself is
-- never stored. A challenge is taken once (used_at), before it expires, by the ramdisk key
-- (base64) that asked for it, at the node's identity generation it was issued at.
CREATE TABLE attest_challenges (
    id                  TEXT PRIMARY KEY,
    node_id             TEXT NOT NULL REFERENCES nodes (id),
    identity_generation BIGINT NOT NULL,
    extra_data          TEXT NOT NULL,
    ramdisk_key         TEXT NOT NULL,
    created_at          BIGINT NOT NULL,
    expires_at          BIGINT NOT NULL,
    used_at             BIGINT
);
CREATE INDEX attest_challenges_node ON attest_challenges (node_id, created_at);

-- attestations: every attestation as received, verified or refused with the rule it broke;
-- pcrs is the JSON of the quoted SHA-256 PCRs 0-9 (hex) when the quote verified.
CREATE TABLE attestations (
    id                  TEXT PRIMARY KEY,
    node_id             TEXT NOT NULL REFERENCES nodes (id),
    identity_generation BIGINT NOT NULL,
    challenge_id        TEXT,
    verified            BIGINT NOT NULL,
    code                TEXT,
    reason              TEXT,
    pcrs                TEXT,
    log_sha256          TEXT,
    envelope            TEXT NOT NULL,
    received_at         BIGINT NOT NULL
);
CREATE INDEX attestations_node ON attestations (node_id, received_at);
