-- Run 17: schema 3's tables (ia_), the append as two plain INSERTs instead of the CTE + unnest.
BEGIN;
INSERT INTO idx_orders (id, total) VALUES (gen_random_uuid(), 1);
INSERT INTO ia_events (id, type, event_key, payload, headers, occurred_at, available_at)
  VALUES (gen_random_uuid(), 'order.created', md5(random()::text), '{"orderId":"0f8fad5b-d9cb-469f-a165-70867728950e","total":1,"lines":[{"sku":"A-1","qty":1}]}'::json, '{}'::json, now(), COALESCE(NULL::timestamptz, date_trunc('milliseconds', now())))
  ON CONFLICT (id) DO NOTHING
  RETURNING seq, id, (extract(epoch from available_at) * 1000)::float8 AS available_at;
INSERT INTO ia_deliveries (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors)
  VALUES (gen_random_uuid(), currval('ia_events_seq_seq'), 'order.created', md5(random()::text), 'Handlers.onOrder', 'pending', 0, date_trunc('milliseconds', now()), '[]');
COMMIT;
