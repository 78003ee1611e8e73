-- Run 18: the business transaction plus schema 3's one-event append (appendOneStatement, values
-- inline) into hot_VARIANT_events / hot_VARIANT_deliveries (hot-append.sh substitutes VARIANT).
BEGIN;
INSERT INTO hot_orders (id, total) VALUES (gen_random_uuid(), 1);
WITH ev AS (
  INSERT INTO hot_VARIANT_events (id, type, event_key, payload, headers, occurred_at, available_at)
  VALUES (gen_random_uuid(), 'order.created', md5(random()::text), '{"orderId":"0f8fad5b-d9cb-469f-a165-70867728950e","total":1,"lines":[{"sku":"A-1","qty":1}]}'::json, '{}'::json, now(), COALESCE(NULL::timestamptz, date_trunc('milliseconds', now())))
  ON CONFLICT (id) DO NOTHING
  RETURNING seq, id, type, event_key, available_at
), dl AS (
  INSERT INTO hot_VARIANT_deliveries (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors)
  SELECT h.id, ev.seq, ev.type, ev.event_key, h.handler, 'pending', 0, ev.available_at, '[]'
  FROM ev CROSS JOIN unnest(ARRAY[gen_random_uuid()], ARRAY['Handlers.onOrder']::text[]) AS h(id, handler)
)
SELECT id, seq, (extract(epoch from available_at) * 1000)::float8 AS available_at FROM ev;
COMMIT;
