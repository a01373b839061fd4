-- What a cluster's nodes share besides sessions: the bundles installed through any node's API
-- (`local/<id>:<version>`), as the content tar their digest is the SHA-256 of, so a node that lacks one installs it
-- from here; the periodic jobs (retention), each held by one node under a lease; each token's role and, for a
-- revoked token (kept, its digest replaced), when it was revoked; and the audit log, only ever appended to. Only added: a node of the previous release ignores them (and so takes a token with a
-- role for what its `admin` says: an operator's is one, any other a user's).
CREATE TABLE bundles (
    id         text NOT NULL,
    version    text NOT NULL,
    digest     text NOT NULL,
    content    bytea NOT NULL,
    shared_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, version)
);

CREATE TABLE jobs (
    name       text PRIMARY KEY,
    node_id    text NOT NULL,
    expires_at timestamptz NOT NULL
);

ALTER TABLE tokens ADD COLUMN role text, ADD COLUMN revoked_at text;

CREATE TABLE audit (
    seq          bigserial PRIMARY KEY,
    at           text NOT NULL,
    actor_tenant text,
    actor_token  text,
    client       text,
    action       text NOT NULL,
    object       text NOT NULL,
    detail       text NOT NULL
);
