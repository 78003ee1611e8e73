-- Run 17: schema 3's claim (ClaimOp + PostgresDialect.claim, one handler, keyed, the unexpanded
-- blocker for one type) as a generic prepared plan on xa_ tables filled by idx-fill.sql, rolled back.
--   psql -d <db> -v h="'Handlers.a'" -f idx-explain-claim.sql   (Handlers.z: a handler with nothing open)
SET plan_cache_mode = force_generic_plan;
PREPARE claim(text, text, text, double precision) AS
WITH c AS MATERIALIZED (SELECT c.id FROM xa_deliveries c
WHERE c.handler IN ($1) AND c.status IN ('pending', 'leased')
  AND ((c.status = 'pending' AND c.available_at <= date_trunc('milliseconds', now())) OR (c.status = 'leased' AND c.lease_until <= date_trunc('milliseconds', now())))
  AND (c.event_key IS NULL OR (NOT EXISTS (
    SELECT 1 FROM xa_deliveries p
    WHERE p.handler = c.handler AND p.event_key = c.event_key AND p.status IN ('pending', 'leased') AND p.event_seq < c.event_seq) AND NOT EXISTS (
    SELECT 1 FROM xa_deliveries u
    WHERE u.handler = '*' AND u.event_key = c.event_key AND u.status IN ('pending', 'leased') AND u.event_seq < c.event_seq AND ((c.handler IN ($1) AND u.event_type IN ('order.created'))))
  AND (c.lease_until IS NULL OR c.status = 'leased' OR NOT EXISTS (
    SELECT 1 FROM xa_deliveries r
    WHERE r.handler = c.handler AND r.event_key = c.event_key AND r.status IN ('pending', 'leased') AND r.event_seq > c.event_seq AND (r.lease_until IS NULL OR r.status = 'leased')) OR EXISTS (
    SELECT 1 FROM xa_deliveries x
    WHERE x.id = (SELECT r.id FROM xa_deliveries r WHERE r.handler = c.handler AND r.event_key = c.event_key AND r.status IN ('pending', 'leased') AND r.event_seq > c.event_seq AND (r.lease_until IS NULL OR r.status = 'leased') ORDER BY r.event_seq LIMIT 1)
      AND (x.status = 'pending' OR x.lease_until <= date_trunc('milliseconds', now())) FOR UPDATE SKIP LOCKED))))
ORDER BY c.event_seq
LIMIT 100 FOR UPDATE SKIP LOCKED),
u AS (
  UPDATE xa_deliveries AS d
  SET status = 'leased', attempts = d.attempts + 1, lease_owner = $2, lease_token = $3, lease_until = (date_trunc('milliseconds', now()) + $4::double precision * interval '1 millisecond')
  WHERE d.id = ANY(ARRAY(SELECT id FROM c))
  RETURNING d.*
)
SELECT d.id, d.event_seq, e.payload::text
FROM u AS d
JOIN (SELECT * FROM xa_events WHERE seq = ANY(ARRAY(SELECT event_seq FROM u))) AS e ON e.seq = d.event_seq;
BEGIN;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE claim(:h, 'w', 't', 30000);
ROLLBACK;
