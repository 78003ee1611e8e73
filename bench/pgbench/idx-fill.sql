-- Run 17: tables of prefix @P@ filled for EXPLAIN — 1,000,000 retained events (delivered: no
-- delivery left, due 8 days ago to 1 day ago), 20,000 open ones (10,000 each of two handlers, keyed
-- by 200 keys), 1,000 dead letters on retained events.  sed s/@P@/ia_/g idx-fill.sql | psql -d <db>
TRUNCATE @P@events, @P@deliveries, @P@dead_letters;
INSERT INTO @P@events (id, type, event_key, payload, headers, occurred_at, available_at)
SELECT gen_random_uuid(), 'order.created', NULL, '{"orderId":1}', '{}', t, t
FROM (SELECT now() - interval '8 days' + (i * interval '604.8 milliseconds') AS t FROM generate_series(1, 1000000) i) s;
INSERT INTO @P@events (id, type, event_key, payload, headers, occurred_at, available_at)
SELECT gen_random_uuid(), 'order.created', 'k' || (i % 200), '{"orderId":1}', '{}', now(), now() FROM generate_series(1, 20000) i;
INSERT INTO @P@deliveries (id, event_seq, event_type, event_key, handler, status, attempts, available_at, errors)
SELECT gen_random_uuid(), seq, type, event_key, CASE WHEN seq % 2 = 0 THEN 'Handlers.a' ELSE 'Handlers.b' END, 'pending', 0, available_at, '[]'
FROM @P@events WHERE seq > 1000000;
INSERT INTO @P@dead_letters (id, event_seq, event_type, event_key, handler, attempts, reason, errors, dead_at)
SELECT gen_random_uuid(), seq, type, event_key, 'Handlers.a', 3, 'exhausted', '[]', now() FROM @P@events WHERE seq % 1000 = 0 AND seq <= 1000000;
VACUUM ANALYZE @P@events;
VACUUM ANALYZE @P@deliveries;
VACUUM ANALYZE @P@dead_letters;
