#!/usr/bin/env bash
# Run 15 (b): drains of a pre-appended backlog by raw claim loops (onerow-dispatch.js), schema 3
# (s3) against the spike (l1: materialise pending + claim; l2: materialise as leased), rounds
# interleaved in a rotated order, without and with 1,000,000 delivered events retained.
#   bench/pgbench/onerow-dispatch.sh [rounds=5] [events=20000] [loops=2] > log
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-5}
EVENTS=${2:-20000}
LOOPS=${3:-2}
VARIANTS=(s3 l1 l2)
for retained in 0 1000000; do
  for round in $(seq 1 "$ROUNDS"); do
    for i in 0 1 2; do
      v=${VARIANTS[$(((i + round - 1) % 3))]}
      node bench/pgbench/onerow-dispatch.js prepare "$v" "$EVENTS" "$retained"
      echo "retained $retained round $round $(node bench/pgbench/onerow-dispatch.js "$v" "$EVENTS" "$LOOPS" 100)"
    done
  done
done
