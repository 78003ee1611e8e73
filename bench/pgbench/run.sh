#!/usr/bin/env bash
# The append statements without any client library: pgbench (C, prepared mode) runs one business
# transaction per event — business only / + a hand-rolled outbox INSERT / + the library's
# one-event append statement (ours.sql: its text with constants inline) — so the ratio is the
# server's alone. Rounds interleaved; tables emptied before each run.
#   bench/pgbench/run.sh [database] [rounds] [seconds]
set -euo pipefail
cd "$(dirname "$0")"
DB=${1:-${BENCH_PGDATABASE:-test}}
ROUNDS=${2:-3}
SECONDS_PER_RUN=${3:-8}
PSQL=(psql -h 127.0.0.1 -U postgres -d "$DB" -qAt)
node -e "
const { DataSource } = require('typeorm');
const { ensureOutboxSchema } = require('../../dist');
(async () => {
  const ds = new DataSource({ type: 'postgres', host: '127.0.0.1', username: 'postgres', database: '$DB' });
  await ds.initialize();
  await ds.query('DROP TABLE IF EXISTS pb_events, pb_deliveries, pb_dead_letters, pb_schema_version, pb_orders, pb_raw');
  await ensureOutboxSchema(ds, { tablePrefix: 'pb_' });
  await ds.query('CREATE TABLE pb_orders (id UUID PRIMARY KEY, total INTEGER NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now())');
  await ds.query('CREATE TABLE pb_raw (id UUID PRIMARY KEY, type VARCHAR(255) NOT NULL, event_key VARCHAR(512), payload JSONB NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now(), processed_at TIMESTAMPTZ)');
  await ds.destroy();
})();"
for round in $(seq 1 "$ROUNDS"); do
  for clients in 1 8; do
    for script in business raw ours; do
      "${PSQL[@]}" -c 'TRUNCATE pb_orders, pb_raw, pb_events, pb_deliveries'
      tps=$(pgbench -h 127.0.0.1 -U postgres -n -M prepared -c "$clients" -j "$((clients > 1 ? 2 : 1))" -T "$SECONDS_PER_RUN" -f "$script.sql" "$DB" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
      echo "round $round clients $clients $script tps $tps"
    done
  done
done
"${PSQL[@]}" -c 'DROP TABLE IF EXISTS pb_events, pb_deliveries, pb_dead_letters, pb_schema_version, pb_orders, pb_raw'
