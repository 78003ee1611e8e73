#!/usr/bin/env bash
# Run 15 (a): the append statements from pgbench (prepared mode, no client library), business
# transaction + hand-rolled INSERT / + schema 3 append / + one-row append (± handler names).
# Each round runs every variant at 1 and 8 clients, in a rotated order; tables emptied before each
# run. Once with the default synchronous_commit, once with SET LOCAL synchronous_commit = off
# (the statements' CPU and WAL cost without waiting for the flush).
#   [SYNCS=off] bench/pgbench/onerow-append.sh [database] [rounds] [seconds] > log; then onerow-summary.py log
set -euo pipefail
cd "$(dirname "$0")"
DB=${1:-test}
ROUNDS=${2:-5}
SECS=${3:-5}
PSQL=(psql -h 127.0.0.1 -U postgres -d "$DB" -qAt -v ON_ERROR_STOP=1)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
VARIANTS=(raw ours3 ours1 ours1h)
for v in "${VARIANTS[@]}"; do
  cp "onerow-$v.sql" "$TMP/$v-on.sql"
  sed 's/^BEGIN;$/BEGIN;\nSET LOCAL synchronous_commit = off;/' "onerow-$v.sql" > "$TMP/$v-off.sql"
done
for sync in ${SYNCS:-on off}; do
  for round in $(seq 1 "$ROUNDS"); do
    for clients in 1 8; do
      n=${#VARIANTS[@]}
      for i in $(seq 0 $((n - 1))); do
        v=${VARIANTS[$(((i + round - 1) % n))]}
        "${PSQL[@]}" -c 'TRUNCATE spk_orders, spk_raw, spk3_events, spk3_deliveries, spk1_events, spk1_deliveries'
        "${PSQL[@]}" -c 'CHECKPOINT' >/dev/null
        tps=$(pgbench -h 127.0.0.1 -U postgres -n -M prepared -c "$clients" -j "$((clients > 1 ? 2 : 1))" -T "$SECS" -f "$TMP/$v-$sync.sql" "$DB" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        echo "sync $sync round $round clients $clients $v tps $tps"
      done
    done
  done
done
