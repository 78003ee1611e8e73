#!/usr/bin/env bash
# Run 18: steady state — pgbench appends (hot-append.sql, synchronous_commit off, 2 clients,
# rate-limited) while 2 claim loops (hot-dispatch.js steady) claim and acknowledge what arrives,
# for `seconds`; per variant in a rotated order: HOT share of the claims, loop backends' CPU per
# event, WAL per event (appends included). Every event has a key of its own (md5), as in run 15.
#   bench/pgbench/hot-steady.sh [database=hot_spk] [rounds=3] [seconds=20] [rate=2500] > log
set -euo pipefail
cd "$(dirname "$0")"
DB=${1:-hot_spk}
ROUNDS=${2:-3}
SECS=${3:-20}
RATE=${4:-2500}
export PGDATABASE=$DB
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
read -r -a VARIANTS <<<"${HOT_VARIANTS:-a h50 h70 h90}"
for v in "${VARIANTS[@]}"; do
  sed "s/VARIANT/$v/g; s/^BEGIN;\$/BEGIN;\nSET LOCAL synchronous_commit = off;/" hot-append.sql >"$TMP/$v.sql"
done
n=${#VARIANTS[@]}
for round in $(seq 1 "$ROUNDS"); do
  for i in $(seq 0 $((n - 1))); do
    v=${VARIANTS[$(((i + round - 1) % n))]}
    node hot-dispatch.js prepare "$v" 0 0
    pgbench -h 127.0.0.1 -U postgres -n -M prepared -c 2 -j 2 -R "$RATE" -T "$SECS" -f "$TMP/$v.sql" "$DB" >"$TMP/pgbench.out" 2>&1 &
    pb=$!
    out=$(node hot-dispatch.js steady "$v" "$SECS" 2 100)
    wait "$pb"
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$TMP/pgbench.out")
    echo "steady round $round load $(cut -d' ' -f1 /proc/loadavg) append_tps $tps $out"
  done
done
