-- The tenant that installed each bundle name first (serve --tenant-bundles): no other tenant may install that name.
-- Only added: a node of the previous release ignores it.
CREATE TABLE bundle_owners (
    bundle text PRIMARY KEY,
    tenant text NOT NULL
);
