-- Run 17: the business transaction plus one row in a hand-rolled outbox table.
BEGIN;
INSERT INTO idx_orders (id, total) VALUES (gen_random_uuid(), 1);
INSERT INTO idx_raw (id, type, event_key, payload) VALUES (gen_random_uuid(), 'order.created', md5(random()::text), '{"orderId":"0f8fad5b-d9cb-469f-a165-70867728950e","total":1,"lines":[{"sku":"A-1","qty":1}]}');
COMMIT;
