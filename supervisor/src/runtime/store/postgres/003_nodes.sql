-- The nodes sharing the database and the base URLs they serve, so that no sandbox of any node reaches another
-- node's API. A node writes its row when it renews its leases.
CREATE TABLE nodes (
    node_id text PRIMARY KEY,
    url     text NOT NULL,
    seen_at timestamptz NOT NULL
);
