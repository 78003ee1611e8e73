#!/usr/bin/env bash
# Run 18: the append statement on schema 3 (a) and on the HOT-able layouts (hNN) from pgbench
# (prepared mode), business transaction + one event, 1 and 8 clients, order rotated per round,
# tables emptied and a CHECKPOINT before each run. SYNC=off (default) adds SET LOCAL
# synchronous_commit = off (the statement's cost without waiting for the flush).
#   bench/pgbench/hot-append.sh [database=hot_spk] [rounds=3] [seconds=5] > log
set -euo pipefail
cd "$(dirname "$0")"
DB=${1:-hot_spk}
ROUNDS=${2:-3}
SECS=${3:-5}
SYNC=${SYNC:-off}
PSQL=(psql -h 127.0.0.1 -U postgres -d "$DB" -qAt -v ON_ERROR_STOP=1)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
read -r -a VARIANTS <<<"${HOT_VARIANTS:-a h50 h70 h90}"
for v in "${VARIANTS[@]}"; do
  if [ "$SYNC" = off ]; then
    sed "s/VARIANT/$v/g; s/^BEGIN;\$/BEGIN;\nSET LOCAL synchronous_commit = off;/" hot-append.sql >"$TMP/$v.sql"
  else
    sed "s/VARIANT/$v/g" hot-append.sql >"$TMP/$v.sql"
  fi
done
n=${#VARIANTS[@]}
for round in $(seq 1 "$ROUNDS"); do
  for clients in 1 8; do
    for i in $(seq 0 $((n - 1))); do
      v=${VARIANTS[$(((i + round - 1) % n))]}
      "${PSQL[@]}" -c "TRUNCATE hot_orders, hot_${v}_events, hot_${v}_deliveries"
      "${PSQL[@]}" -c 'CHECKPOINT' >/dev/null
      l0=$("${PSQL[@]}" -c 'SELECT pg_current_wal_lsn()')
      tps=$(pgbench -h 127.0.0.1 -U postgres -n -M prepared -c "$clients" -j "$((clients > 1 ? 2 : 1))" -T "$SECS" -f "$TMP/$v.sql" "$DB" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
      l1=$("${PSQL[@]}" -c 'SELECT pg_current_wal_lsn()')
      read -r tx pages <<<"$("${PSQL[@]}" -F ' ' -c "SELECT (SELECT count(*) FROM hot_${v}_events), pg_relation_size('hot_${v}_deliveries') / 8192")"
      wal=$("${PSQL[@]}" -c "SELECT round(pg_wal_lsn_diff('$l1', '$l0') / greatest($tx, 1))")
      echo "sync $SYNC round $round clients $clients $v tps $tps events $tx deliveries_pages $pages wal_per_tx $wal load $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
