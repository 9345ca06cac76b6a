-- Tenant isolation on the switch (issue 31): the site's switches (driver, how to reach
-- them, the SSH key sealed like BMC passwords), each node's ports on them (per NIC, set by an
-- operator or learned by LLDP (a neighbour names its switch by the switch's chassis id or
-- by a system name equal to its id), with the network and VLAN the last move read back), the
-- tenant VLANs handed to live leases (one per lease and pool, never two leases on one: the
-- primary key) and the nodes on each (a VLAN is free again when its last node left it).
-- Times are milliseconds; portable SQL, as in 0001.
CREATE TABLE switches (
    id         TEXT PRIMARY KEY,
    driver     TEXT NOT NULL,
    address    TEXT NOT NULL,
    command    TEXT,
    secret     TEXT,
    host_key   TEXT,
    chassis_id TEXT,
    created_at BIGINT NOT NULL
);

CREATE TABLE node_ports (
    node_id   TEXT NOT NULL REFERENCES nodes (id),
    mac       TEXT NOT NULL,
    switch_id TEXT NOT NULL REFERENCES switches (id),
    port      TEXT NOT NULL,
    source    TEXT NOT NULL,
    network   TEXT,
    vlan      BIGINT,
    moved_at  BIGINT,
    PRIMARY KEY (node_id, mac)
);
CREATE UNIQUE INDEX node_ports_switch_port ON node_ports (switch_id, port);

CREATE TABLE tenant_vlans (
    pool_id      TEXT NOT NULL,
    vlan         BIGINT NOT NULL,
    lease_id     TEXT NOT NULL,
    allocated_at BIGINT NOT NULL,
    PRIMARY KEY (pool_id, vlan)
);
CREATE UNIQUE INDEX tenant_vlans_lease ON tenant_vlans (pool_id, lease_id);

CREATE TABLE tenant_vlan_nodes (
    node_id  TEXT PRIMARY KEY REFERENCES nodes (id),
    pool_id  TEXT NOT NULL,
    vlan     BIGINT NOT NULL,
    lease_id TEXT NOT NULL
);
