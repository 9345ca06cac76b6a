-- Measured-boot baselines (issue 32). Portable SQL, as in 0001.
--
-- boot_baselines: the golden values a node's attestations are compared with, each learned
-- from one verified attestation of node_id (its quoted SHA-256 PCRs 0-9, JSON {pcr: hex};
-- its event log stays in that attestation's envelope, to name the first differing event).
-- scope 'node' applies to node_id alone (boot entries: PCR 1); scope 'profile' to every node
-- of hardware_profile running firmware (the pool's firmwareBaseline, "component=version,..."),
-- for the firmware's own PCRs. At most one is active per node, or per profile and firmware;
-- the one it replaced becomes obsolete. learned_by says how: commissioning, a teardown in a
-- learn pool, or an operator's approval (with the credential).
CREATE TABLE boot_baselines (
    id               TEXT PRIMARY KEY,
    scope            TEXT NOT NULL,
    node_id          TEXT NOT NULL REFERENCES nodes (id),
    hardware_profile TEXT,
    firmware         TEXT,
    attestation_id   TEXT NOT NULL REFERENCES attestations (id),
    pcrs             TEXT NOT NULL,
    state            TEXT NOT NULL,
    learned_by       TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    replaced_at      BIGINT
);
CREATE INDEX boot_baselines_node ON boot_baselines (node_id, state);
CREATE INDEX boot_baselines_profile ON boot_baselines (hardware_profile, firmware, state);

-- The ramdisk key (base64 Ed25519) that signed an attestation and a wipe report: the
-- teardown's attest step takes only an attestation from the key whose wipe it accepted.
ALTER TABLE attestations ADD COLUMN ramdisk_key TEXT;
ALTER TABLE wipe_reports ADD COLUMN signer_key TEXT;
