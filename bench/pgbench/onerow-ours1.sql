-- Run 15 (a): the business transaction plus the spike's append: the event row alone (its tx
-- column is the default pg_current_xact_id()), 3 index entries (seq, id, (tx, seq)).
BEGIN;
INSERT INTO spk_orders (id, total) VALUES (gen_random_uuid(), 1);
INSERT INTO spk1_events (id, type, event_key, payload, headers, occurred_at, available_at)
VALUES (gen_random_uuid(), 'order.created', md5(random()::text), '{"orderId":"0f8fad5b-d9cb-469f-a165-70867728950e","total":1,"lines":[{"sku":"A-1","qty":1}]}'::json, '{}'::json, now(), COALESCE(NULL::timestamptz, date_trunc('milliseconds', now())))
ON CONFLICT (id) DO NOTHING
RETURNING id, seq, (extract(epoch from available_at) * 1000)::float8 AS available_at;
COMMIT;
