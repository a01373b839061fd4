-- The bundles installed through any node's API (`local/<id>:<version>`), as the content tar their digest is the
-- SHA-256 of, so a node that lacks one installs it from here. Only added: a node of the previous release ignores it.
CREATE TABLE bundles (
    id         text NOT NULL,
    version    text NOT NULL,
    digest     text NOT NULL,
    content    bytea NOT NULL,
    shared_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, version)
);
