-- Tenants: their tokens (only a digest of each), their quotas, the bundles granted to them (serve --tenant-bundles)
-- and what they spent each day. Every node reads them
-- here, so a token made or revoked on one node holds on all of them.
CREATE TABLE tokens (
    id           text PRIMARY KEY,
    tenant       text NOT NULL,
    admin        boolean NOT NULL,
    label        text,
    created_at   text NOT NULL,
    expires_at   text,
    last_used_at text,
    sha256       text NOT NULL
);

CREATE TABLE tenant_quotas (
    tenant           text PRIMARY KEY,
    sessions         bigint,
    concurrent_turns bigint,
    tokens_per_day   bigint
);

CREATE TABLE tenant_spent (
    tenant           text NOT NULL,
    day              text NOT NULL,
    input_tokens     bigint NOT NULL DEFAULT 0,
    output_tokens    bigint NOT NULL DEFAULT 0,
    cached_tokens    bigint NOT NULL DEFAULT 0,
    reasoning_tokens bigint NOT NULL DEFAULT 0,
    model_calls      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, day)
);

CREATE TABLE tenant_grants (
    tenant text NOT NULL,
    bundle text NOT NULL,
    PRIMARY KEY (tenant, bundle)
);
