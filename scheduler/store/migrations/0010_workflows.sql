-- Workflows and the rows the capacity and metal sides talk through (seed 000).
-- Portable SQL, as in 0001.

-- One row per workflow run: a node, a definition (`metal-tenant-root-release@1`, ...), the
-- step list resolved and frozen at creation, where it is (step index, attempt), who runs it
-- (owner, claim lease) and the fencing generation every commit of a step is checked against.
CREATE TABLE workflow_runs (
    id            TEXT PRIMARY KEY,
    node_id       TEXT NOT NULL REFERENCES nodes (id),
    definition    TEXT NOT NULL,
    steps         TEXT NOT NULL,
    step_index    BIGINT NOT NULL,
    attempt       BIGINT NOT NULL,
    status        TEXT NOT NULL,
    context       TEXT NOT NULL,
    owner         TEXT,
    lease_until   BIGINT,
    fence         BIGINT NOT NULL,
    not_before    BIGINT NOT NULL,
    step_started  BIGINT NOT NULL,
    step_deadline BIGINT NOT NULL,
    last_error    TEXT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    finished_at   BIGINT
);
-- At most one running workflow per node.
CREATE UNIQUE INDEX workflow_runs_running ON workflow_runs (node_id) WHERE status = 'running';
CREATE INDEX workflow_runs_due ON workflow_runs (status, not_before);
CREATE INDEX workflow_runs_node ON workflow_runs (node_id, created_at);

-- Append-only: every attempt of every step with its result, raw outcome and times.
CREATE TABLE workflow_history (
    run_id      TEXT NOT NULL REFERENCES workflow_runs (id),
    seq         BIGINT NOT NULL,
    step        TEXT NOT NULL,
    attempt     BIGINT NOT NULL,
    result      TEXT NOT NULL,
    detail      TEXT NOT NULL,
    fence       BIGINT NOT NULL,
    started_at  BIGINT NOT NULL,
    finished_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Work the capacity side asks of the metal side (start or end a lease) and notices the
-- metal side gives the capacity side (bound, refused, quarantined). The id is the request's
-- unique key, so asking twice is asking once.
CREATE TABLE metal_work (
    id         TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    state      TEXT NOT NULL,
    result     TEXT,
    created_at BIGINT NOT NULL,
    done_at    BIGINT
);
CREATE INDEX metal_work_queued ON metal_work (state, created_at);

CREATE TABLE capacity_work (
    id         TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    state      TEXT NOT NULL,
    result     TEXT,
    created_at BIGINT NOT NULL,
    done_at    BIGINT
);
CREATE INDEX capacity_work_queued ON capacity_work (state, created_at);

-- A BMC credential rotation in flight: the new password sealed, recorded before the BMC is
-- asked, so after a crash the teardown can find out which of the two works.
ALTER TABLE bmcs ADD COLUMN pending_secret TEXT;
-- What a lease asks of its teardown (`secure-erase`), set at lease start.
ALTER TABLE nodes ADD COLUMN release_wipe TEXT;
-- The allocation a tenant-root lease holds the node for, from lease start to teardown's end.
ALTER TABLE nodes ADD COLUMN lease_id TEXT;
-- When the allocation's lease bound (its node deployed the lessee's profile); a node
-- binding's reservation becomes active once every allocation is bound.
ALTER TABLE allocations ADD COLUMN bound_at BIGINT;

-- Inventories reported while a node is tenant-controlled: advisory snapshots, appended,
-- changing nothing the platform decides on.
CREATE TABLE inventory_snapshots (
    id                  TEXT PRIMARY KEY,
    node_id             TEXT NOT NULL REFERENCES nodes (id),
    identity_generation BIGINT NOT NULL,
    advisory            BIGINT NOT NULL,
    inventory           TEXT NOT NULL,
    envelope            TEXT NOT NULL,
    reported_at         BIGINT NOT NULL
);
CREATE INDEX inventory_snapshots_node ON inventory_snapshots (node_id, reported_at);

-- A deleted tenant: its row stays (reservations, records and events name it), hidden from
-- the API, its credentials revoked.
ALTER TABLE tenants ADD COLUMN deleted_at BIGINT;
