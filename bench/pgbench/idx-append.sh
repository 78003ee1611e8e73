#!/usr/bin/env bash
# Run 17 (issue 27, append side): the business transaction + hand-rolled INSERT against + schema
# 3's append statement on variants of its tables (idx-setup.sql), pgbench in prepared mode, no
# client library. Each round runs every variant at 1 and 8 clients in a rotated order; tables
# emptied and a CHECKPOINT before each run; WAL bytes per transaction from pg_current_wal_lsn().
#   psql -d <db> -f idx-setup.sql; [SYNCS="on off"] idx-append.sh <db> [rounds] [seconds] > log
#   idx-summary.py log
set -euo pipefail
cd "$(dirname "$0")"
DB=${1:?database}
ROUNDS=${2:-5}
SECS=${3:-5}
PSQL=(psql -h 127.0.0.1 -U postgres -d "$DB" -qAt -v ON_ERROR_STOP=1)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
VARIANTS=(${VARIANTS:-raw a b c m bm two})
prefix() { case $1 in a) echo ia_ ;; b) echo ib_ ;; c) echo ic_ ;; m) echo im_ ;; bm) echo ibm_ ;; esac; }
for v in "${VARIANTS[@]}"; do
  case $v in
    raw) cp idx-raw.sql "$TMP/$v-on.sql" ;;
    two) cp idx-two.sql "$TMP/$v-on.sql" ;;
    # nc: schema 3 without ON CONFLICT (what the idempotent append's speculative insert costs);
    # nk: schema 3, an event without a key (no key index entry: 6 entries instead of 7).
    nc) sed -e 's/@P@/ia_/g' -e '/ON CONFLICT (id) DO NOTHING/d' idx-ours.sql.in > "$TMP/$v-on.sql" ;;
    nk) sed -e 's/@P@/ia_/g' -e "s/'order.created', md5(random()::text)/'order.created', NULL/" idx-ours.sql.in > "$TMP/$v-on.sql" ;;
    *) sed "s/@P@/$(prefix "$v")/g" idx-ours.sql.in > "$TMP/$v-on.sql" ;;
  esac
  sed 's/^BEGIN;$/BEGIN;\nSET LOCAL synchronous_commit = off;/' "$TMP/$v-on.sql" > "$TMP/$v-off.sql"
done
TABLES="idx_orders, idx_raw, ia_events, ia_deliveries, ib_events, ib_deliveries, ic_events, ic_deliveries, im_events, im_deliveries, ibm_events, ibm_deliveries"
for sync in ${SYNCS:-on}; do
  for round in $(seq 1 "$ROUNDS"); do
    for clients in 1 8; do
      n=${#VARIANTS[@]}
      for i in $(seq 0 $((n - 1))); do
        v=${VARIANTS[$(((i + round - 1) % n))]}
        "${PSQL[@]}" -c "TRUNCATE $TABLES"
        "${PSQL[@]}" -c 'CHECKPOINT' >/dev/null
        lsn0=$("${PSQL[@]}" -c 'SELECT pg_current_wal_lsn()')
        out=$(pgbench -h 127.0.0.1 -U postgres -n -M prepared -c "$clients" -j "$((clients > 1 ? 2 : 1))" -T "$SECS" -f "$TMP/$v-$sync.sql" "$DB" 2>/dev/null)
        lsn1=$("${PSQL[@]}" -c 'SELECT pg_current_wal_lsn()')
        tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
        tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out")
        wal=$("${PSQL[@]}" -c "SELECT round(pg_wal_lsn_diff('$lsn1', '$lsn0') / GREATEST($tx, 1))")
        echo "sync $sync round $round clients $clients $v tps $tps wal $wal load $(cut -d' ' -f1 /proc/loadavg)"
      done
    done
  done
done
