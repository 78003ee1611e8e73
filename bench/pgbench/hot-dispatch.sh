#!/usr/bin/env bash
# Run 18: drains of 20,000 pre-appended events by 2 raw claim loops (hot-dispatch.js), schema 3
# (a) against the HOT-able layout at several fillfactors (hNN), no key and 200 keys, rounds
# interleaved in a rotated order. A database of its own (PGDATABASE, default hot_spk).
#   PGDATABASE=hot_spk node bench/pgbench/hot-dispatch.js setup
#   bench/pgbench/hot-dispatch.sh [rounds=3] [events=20000] [loops=2] > log; hot-summary.py log
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
EVENTS=${2:-20000}
LOOPS=${3:-2}
read -r -a VARIANTS <<<"${HOT_VARIANTS:-a h50 h70 h80 h90}"
n=${#VARIANTS[@]}
for round in $(seq 1 "$ROUNDS"); do
  for keys in 0 200; do
    for i in $(seq 0 $((n - 1))); do
      v=${VARIANTS[$(((i + round - 1) % n))]}
      node bench/pgbench/hot-dispatch.js prepare "$v" "$EVENTS" "$keys"
      echo "keys $keys round $round load $(cut -d' ' -f1 /proc/loadavg) $(node bench/pgbench/hot-dispatch.js "$v" "$EVENTS" "$LOOPS" 100)"
    done
  done
done
