-- Run 17: retention, deleteOrphans and the by-event_seq lookups (inspection, undoAppend) on xa_
-- tables filled by idx-fill.sql (1,000,000 retained events, 20,000 open). The variant's DDL runs
-- in a transaction that is rolled back:
--   psql -d <db> -v label=b -v ddl='DROP INDEX xa_events_available_idx;' -f idx-explain-retention.sql
\pset pager off
-- retention select, cutoff 2 days (many deletable) and 8 days (none)
PREPARE ret(double precision) AS SELECT e.seq FROM xa_events e WHERE e.available_at < (date_trunc('milliseconds', now()) + $1::double precision * interval '1 millisecond') AND NOT EXISTS (SELECT 1 FROM xa_deliveries x WHERE x.event_seq = e.seq) AND NOT EXISTS (SELECT 1 FROM xa_dead_letters y WHERE y.event_seq = e.seq) ORDER BY e.available_at LIMIT 1000;
PREPARE orphans(bigint[], double precision) AS DELETE FROM xa_events WHERE seq = ANY($1) AND NOT EXISTS (SELECT 1 FROM xa_deliveries x WHERE x.event_seq = xa_events.seq) AND NOT EXISTS (SELECT 1 FROM xa_dead_letters y WHERE y.event_seq = xa_events.seq) AND available_at < (date_trunc('milliseconds', now()) + $2::double precision * interval '1 millisecond');
PREPARE inspect(bigint[]) AS SELECT d.id FROM xa_deliveries d WHERE d.event_seq = ANY($1) ORDER BY d.handler;
PREPARE undo(bigint[]) AS DELETE FROM xa_deliveries WHERE event_seq = ANY($1);
SELECT array_agg(g)::text AS arr FROM generate_series(1001, 2000) g \gset
BEGIN;
\echo === :label
:ddl
\echo --- retention select, 2 days
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) EXECUTE ret(-172800000);
\echo --- retention select, 8 days (nothing old enough)
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) EXECUTE ret(-691200000);
\echo --- deleteOrphans, 1000 seqs
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) EXECUTE orphans(:'arr', -172800000);
\echo --- inspection / undo by event_seq (3 open)
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) EXECUTE inspect(ARRAY[1000001, 1000002, 1010000]::bigint[]);
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) EXECUTE undo(ARRAY[1000001, 1000002, 1010000]::bigint[]);
ROLLBACK;
