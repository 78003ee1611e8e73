-- One business transaction: an order row (pgbench -M prepared; see run.sh).
BEGIN;
INSERT INTO pb_orders (id, total) VALUES (gen_random_uuid(), 1);
COMMIT;
