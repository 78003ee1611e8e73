/*
 * The business side of the append scenarios (S1, append-tx, append-rtt): an orders table, a
 * hand-rolled outbox table beside it (the baseline an append is compared with), and the rows and
 * the event payload they write.
 */
import { randomUUID } from 'node:crypto';
import type { DataSource, QueryRunner } from 'typeorm';
import { BUSINESS_TABLE, HANDROLLED_TABLE } from './common';

/** Creates both tables if missing and empties them. */
export async function resetBusinessTables(ds: DataSource): Promise<void> {
  await ds.query(
    `CREATE TABLE IF NOT EXISTS ${BUSINESS_TABLE} (id UUID PRIMARY KEY, total INTEGER NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
  );
  await ds.query(
    `CREATE TABLE IF NOT EXISTS ${HANDROLLED_TABLE} (id UUID PRIMARY KEY, type VARCHAR(255) NOT NULL, event_key VARCHAR(512), payload JSONB NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now(), processed_at TIMESTAMPTZ)`,
  );
  await ds.query(`TRUNCATE ${BUSINESS_TABLE}, ${HANDROLLED_TABLE}`);
}

/** The event payload of order `id` (the i-th of a run). */
export function orderPayload(id: string, i: number): object {
  return { orderId: id, total: i, lines: [{ sku: 'A-1', qty: 1 }] };
}

/** The business write: one order row. */
export function insertOrder(qr: QueryRunner, id: string, i: number): Promise<unknown> {
  return qr.query(`INSERT INTO ${BUSINESS_TABLE} (id, total) VALUES ($1, $2)`, [id, i]);
}

/** The hand-rolled outbox's write: one plain INSERT of the event. */
export function insertHandrolled(
  qr: QueryRunner,
  type: string,
  key: string,
  payload: object,
): Promise<unknown> {
  return qr.query(
    `INSERT INTO ${HANDROLLED_TABLE} (id, type, event_key, payload) VALUES ($1, $2, $3, $4)`,
    [randomUUID(), type, key, JSON.stringify(payload)],
  );
}
