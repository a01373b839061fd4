-- The usage ledger gains a model and a bundle per row, and each turn's tool calls and times. Rows written before
-- keep an empty model and bundle.
ALTER TABLE tenant_spent
    ADD COLUMN model          text NOT NULL DEFAULT '',
    ADD COLUMN bundle         text NOT NULL DEFAULT '',
    ADD COLUMN turns          bigint NOT NULL DEFAULT 0,
    ADD COLUMN tool_calls     bigint NOT NULL DEFAULT 0,
    ADD COLUMN wall_ms        bigint NOT NULL DEFAULT 0,
    ADD COLUMN sandbox_cpu_ms bigint NOT NULL DEFAULT 0,
    DROP CONSTRAINT tenant_spent_pkey,
    ADD PRIMARY KEY (tenant, day, model, bundle);
