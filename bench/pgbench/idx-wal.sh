#!/usr/bin/env bash
# Run 17: the WAL records one transaction of a pgbench script writes (its own xid, pg_walinspect;
# needs CREATE EXTENSION pg_walinspect), after 20 warm-up transactions. Full-page images shown apart.
#   idx-wal.sh <db> <script.sql with table names substituted>
DB=${1:?database}
P="psql -h 127.0.0.1 -U postgres -d $DB -qAt"
f=$2
for i in $(seq 1 20); do $P -f $f >/dev/null; done
l0=$($P -c "select pg_current_wal_lsn()")
xid=$(sed 's/^BEGIN;$/BEGIN;\nSELECT txid_current();/' $f | $P | sed -n 1p)
l1=$($P -c "select pg_current_wal_lsn()")
$P -c "select w.resource_manager || ' ' || w.record_type || ' ' || coalesce(c.relname, '?') || ' ' || (w.record_length - w.fpi_length) || CASE WHEN w.fpi_length > 0 THEN ' (+' || w.fpi_length || ' FPI)' ELSE '' END from pg_get_wal_records_info('$l0', '$l1') w left join pg_class c on c.relfilenode = (regexp_match(w.block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid where w.xid::text::bigint = $xid"
$P -c "select 'total ' || sum(record_length - fpi_length) || ' without FPI' from pg_get_wal_records_info('$l0', '$l1') where xid::text::bigint = $xid"
