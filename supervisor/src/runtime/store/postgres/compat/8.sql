-- The statements of the service-rs releases whose newest schema version is 8, read from
-- supervisor/src/runtime/store/postgres/*.rs by tests/tests/suite/schema_compat.rs. Kept as they are once
-- a later release has its own set.

SELECT id FROM sessions WHERE id = ANY($1);

INSERT INTO jobs (name, node_id, expires_at) VALUES ($1, $2, now() + make_interval(secs => $3)) ON CONFLICT (name) DO UPDATE SET node_id = $2, expires_at = now() + make_interval(secs => $3) WHERE jobs.node_id = $2 OR jobs.expires_at < now() RETURNING node_id;

SELECT pg_database_size(current_database());

INSERT INTO bundles (id, version, digest, content) VALUES ($1, $2, $3, $4) ON CONFLICT (id, version) DO UPDATE SET digest = $3, content = $4, shared_at = now();

SELECT id, version, digest FROM bundles WHERE $1::text IS NULL OR id = $1 ORDER BY id, version;

SELECT digest, content FROM bundles WHERE id = $1 AND version = $2;

DELETE FROM bundles WHERE id = $1 AND version = $2;

SELECT last_seq, journal_bytes, (SELECT count(*) FROM history WHERE session_id = $1) FROM sessions WHERE id = $1;

SELECT message FROM (SELECT n, message FROM history WHERE session_id = $1 AND n > COALESCE((SELECT max(n) FROM history WHERE session_id = $1 AND message = $3), 0) ORDER BY n DESC LIMIT $2) recent ORDER BY n;

SELECT message FROM history WHERE session_id = $1 ORDER BY n LIMIT $2;

SELECT last_seq FROM sessions WHERE id = $1;

SELECT seq, body FROM events WHERE session_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq;

WITH claimed AS (UPDATE sessions SET last_seq = $2, record = coalesce($3, record), journal_bytes = journal_bytes + $4 WHERE id = $1 AND last_seq = $5 RETURNING id), stored AS (INSERT INTO events (session_id, seq, body) SELECT c.id, s, b FROM claimed c, unnest($6::bigint[], $7::text[]) AS t (s, b)), remembered AS (INSERT INTO history (session_id, message) SELECT c.id, m FROM claimed c, unnest($8::text[]) WITH ORDINALITY AS t (m, i) ORDER BY i), indexed AS (INSERT INTO approvals (request_id, session_id) SELECT r, c.id FROM claimed c, unnest($9::text[]) AS t (r) ON CONFLICT DO NOTHING) SELECT count(*), (CASE WHEN count(*) > 0 AND $10 <> '' THEN pg_notify($11, $10) END) IS NULL, CASE WHEN $12 THEN set_config('synchronous_commit', 'off', true) END FROM claimed;

INSERT INTO nodes (node_id, url, seen_at) VALUES ($1, $2, now()) ON CONFLICT (node_id) DO UPDATE SET url = $2, seen_at = now();

SELECT url FROM nodes WHERE node_id <> $1 AND seen_at > now() - make_interval(secs => $2);

INSERT INTO sessions (id, record, created_at) VALUES ($1, $2, $3);

SELECT pg_advisory_xact_lock(hashtextextended('service-sessions:' || $1, 0));

WITH have AS (
                     SELECT count(*) AS n FROM sessions
                     WHERE COALESCE(record::jsonb ->> 'tenant', $4) = $5
                 ), added AS (
                     INSERT INTO sessions (id, record, created_at)
                     SELECT $1, $2, $3 FROM have WHERE n < $6
                     RETURNING id
                 )
                 SELECT (SELECT n FROM have), EXISTS (SELECT 1 FROM added);

SELECT record FROM sessions WHERE id = $1;

SELECT id, record FROM sessions ORDER BY created_at, id;

DELETE FROM sessions WHERE id = $1;

WITH away AS (SELECT h.home, n.url, COALESCE(n.seen_at > now() - make_interval(secs => $4), false) AS live FROM (SELECT record::json->>'home' AS home FROM sessions WHERE id = $1) h LEFT JOIN nodes n ON n.node_id = h.home WHERE h.home IS NOT NULL AND h.home <> $2), held AS (SELECT node_id, url, expires_at > now() AS live FROM owners WHERE session_id = $1 FOR UPDATE), renewed AS (UPDATE owners SET node_id = $2, url = $3, expires_at = now() + make_interval(secs => $4) WHERE session_id = $1 AND NOT EXISTS (SELECT 1 FROM away) AND EXISTS (SELECT 1 FROM held WHERE NOT live OR node_id = $2) RETURNING 1), made AS (INSERT INTO owners (session_id, node_id, url, expires_at) SELECT $1, $2, $3, now() + make_interval(secs => $4) WHERE NOT EXISTS (SELECT 1 FROM away) AND NOT EXISTS (SELECT 1 FROM held) AND EXISTS (SELECT 1 FROM sessions WHERE id = $1) ON CONFLICT (session_id) DO NOTHING RETURNING 1) SELECT h.node_id, h.url, h.live, EXISTS (SELECT 1 FROM made), a.home, a.url, a.live FROM (SELECT 1) one LEFT JOIN held h ON true LEFT JOIN away a ON true;

DELETE FROM owners WHERE session_id = $1 AND node_id = $2;

UPDATE owners SET expires_at = now() + make_interval(secs => $3) WHERE node_id = $1 AND session_id = ANY($2);

DELETE FROM owners WHERE node_id = $1 AND NOT (session_id = ANY($2)) AND expires_at < now() + make_interval(secs => $3::float8 * 0.9);

SELECT session_id FROM approvals WHERE request_id = $1;

WITH ins AS (INSERT INTO names (name, session_id) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING session_id) SELECT session_id FROM ins UNION ALL SELECT session_id FROM names WHERE name = $1 LIMIT 1;

SELECT session_id FROM names WHERE name = $1;

INSERT INTO grants (session_id, grant_json) VALUES ($1, $2) ON CONFLICT DO NOTHING;

SELECT grant_json FROM grants WHERE session_id = $1;

SELECT 1;

SELECT to_regclass('service_schema') IS NOT NULL;

SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = 'service_schema' AND column_name = 'serves_from' AND table_schema = current_schema());

SELECT version, serves_from FROM service_schema ORDER BY version;

SELECT version, NULL::integer FROM service_schema ORDER BY version;

SELECT pg_advisory_xact_lock($1);

INSERT INTO service_schema (version) VALUES ($1);

UPDATE service_schema SET serves_from = $2 WHERE version = $1 AND serves_from IS NULL;

UPDATE tokens SET revoked_at = $2, sha256 = $3 WHERE id = $1 AND revoked_at IS NULL;

UPDATE tokens SET last_used_at = $2 WHERE id = $1;

DELETE FROM tenant_quotas WHERE tenant = $1;

INSERT INTO tenant_quotas (tenant, sessions, concurrent_turns, tokens_per_day) VALUES ($1, $2, $3, $4) ON CONFLICT (tenant) DO UPDATE SET sessions = $2, concurrent_turns = $3, tokens_per_day = $4;

SELECT tenant, sessions, concurrent_turns, tokens_per_day FROM tenant_quotas;

INSERT INTO tenant_grants (tenant, bundle) VALUES ($1, $2) ON CONFLICT DO NOTHING;

DELETE FROM tenant_grants WHERE tenant = $1 AND bundle = $2;

INSERT INTO bundle_owners (bundle, tenant) VALUES ($1, $2) ON CONFLICT DO NOTHING;

SELECT tenant FROM bundle_owners WHERE bundle = $1;

SELECT tenant, bundle FROM tenant_grants ORDER BY tenant, bundle;

INSERT INTO tenant_spent (tenant, day, model, bundle, input_tokens, output_tokens, cached_tokens, reasoning_tokens, model_calls, turns, tool_calls, wall_ms, sandbox_cpu_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) ON CONFLICT (tenant, day, model, bundle) DO UPDATE SET input_tokens = tenant_spent.input_tokens + $5, output_tokens = tenant_spent.output_tokens + $6, cached_tokens = tenant_spent.cached_tokens + $7, reasoning_tokens = tenant_spent.reasoning_tokens + $8, model_calls = tenant_spent.model_calls + $9, turns = tenant_spent.turns + $10, tool_calls = tenant_spent.tool_calls + $11, wall_ms = tenant_spent.wall_ms + $12, sandbox_cpu_ms = tenant_spent.sandbox_cpu_ms + $13;

INSERT INTO audit (at, actor_tenant, actor_token, client, action, object, detail) VALUES ($1, $2, $3, $4, $5, $6, $7);

SELECT seq, at, actor_tenant, actor_token, client, action, object, detail FROM (SELECT * FROM audit ORDER BY seq DESC LIMIT $1) last ORDER BY seq;

SELECT tenant, day, model, bundle, input_tokens, output_tokens, cached_tokens, reasoning_tokens, model_calls, turns, tool_calls, wall_ms, sandbox_cpu_ms FROM tenant_spent WHERE day >= $1 AND ($2::text IS NULL OR day <= $2) ORDER BY tenant, day, model, bundle;

INSERT INTO tokens (id, tenant, admin, label, created_at, expires_at, last_used_at, sha256, role, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10);

SELECT id, tenant, admin, label, created_at, expires_at, last_used_at, sha256, role, revoked_at FROM tokens ORDER BY created_at, id;

SELECT id, tenant, admin, label, created_at, expires_at, last_used_at, sha256, role, revoked_at FROM tokens WHERE id = $1;

