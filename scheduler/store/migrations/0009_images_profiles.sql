-- Images and profiles. An image is imported once (by URL and checksum, or by catalog name),
-- kept only when its streamed digest matches, and stored in its served form (seekable zstd)
-- with its deploy plan; a profile's versions are immutable and each names one image (or, for an installer
-- deploy, the installer it boots).
-- Portable SQL, as in 0001.

CREATE TABLE images (
    id             TEXT PRIMARY KEY,
    generation     BIGINT NOT NULL,
    tenant_id      TEXT NOT NULL REFERENCES tenants (id),
    name           TEXT NOT NULL,
    public         BIGINT NOT NULL,
    state          TEXT NOT NULL,
    source         TEXT NOT NULL,
    bytes_done     BIGINT NOT NULL,
    bytes_total    BIGINT,
    rate_bps       BIGINT NOT NULL,
    attempts       BIGINT NOT NULL,
    error          TEXT,
    source_format  TEXT,
    plan           TEXT,
    owner          TEXT,
    lease_until    BIGINT,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);
CREATE UNIQUE INDEX images_tenant_name ON images (tenant_id, name);
CREATE INDEX images_state ON images (state);

CREATE TABLE profiles (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants (id),
    public         BIGINT NOT NULL,
    latest_version BIGINT NOT NULL,
    created_at     BIGINT NOT NULL
);

CREATE TABLE profile_versions (
    profile_id TEXT NOT NULL REFERENCES profiles (id),
    version    BIGINT NOT NULL,
    image_id   TEXT REFERENCES images (id),
    spec       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (profile_id, version)
);
CREATE INDEX profile_versions_image ON profile_versions (image_id);

-- What a deploy plan was derived from (NULL for a hand-made plan), and its kind: 'image' (a
-- DeployPlan for the ramdisk) or 'installer' (an installer's kernel line and rendered config).
ALTER TABLE deploy_plans ADD COLUMN mode TEXT NOT NULL DEFAULT 'image';
ALTER TABLE deploy_plans ADD COLUMN image_id TEXT;
ALTER TABLE deploy_plans ADD COLUMN profile_id TEXT;
ALTER TABLE deploy_plans ADD COLUMN profile_version BIGINT;
