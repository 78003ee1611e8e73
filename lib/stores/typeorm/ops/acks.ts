import { LeaseLostError } from '../../../errors/lease-lost.error';
import { Lease } from '../../../interfaces/outbox-store.interface';
import { isUuid } from '../../../outbox-validation';
import { Row } from '../dialects/sql-dialect';
import { StoreContext } from './context';

/**
 * Leases per `ackMany` statement: 4 bound parameters each (plus one), far below every dialect's
 * limit (SQLite 32,766, PostgreSQL 65,535) and a statement each database plans quickly.
 */
const ACK_MANY_CHUNK = 500;

/**
 * Acknowledged deliveries leave the table (the claim reads open work only); the event stays
 * until retention removes it. Fenced like every lease operation: only rows whose lease still
 * matches and is live go, in one statement per chunk (arrays on PostgreSQL).
 */
export class AckOp {
  constructor(private readonly ctx: StoreContext) {}

  async ack(lease: Lease): Promise<void> {
    const acked = await this.ackMany([lease]);
    if (acked.length === 0) throw new LeaseLostError(lease.deliveryId, lease.owner);
  }

  async ackMany(leases: Lease[]): Promise<string[]> {
    // A lease that is not a UUID cannot own a row (and PostgreSQL would reject it as a uuid).
    const valid = leases.filter((l) => isUuid(l.deliveryId));
    if (valid.length === 0) return [];
    // Primary-key order: concurrent batches lock rows in one order.
    valid.sort((a, b) => (a.deliveryId < b.deliveryId ? -1 : a.deliveryId > b.deliveryId ? 1 : 0));
    const d = this.ctx.dialect;
    const rows: Row[] = [];
    for (let i = 0; i < valid.length; i += ACK_MANY_CHUNK) {
      const chunk = valid.slice(i, i + ACK_MANY_CHUNK);
      rows.push(...(await d.run(() => d.deleteLeased(chunk), d.deleteLeasedRunOptions)));
    }
    // Report each acknowledged delivery under the id its caller gave.
    const given = new Map(valid.map((l) => [l.deliveryId.toLowerCase(), l.deliveryId]));
    const out = new Set<string>();
    for (const r of rows) {
      const id = String(r.id).toLowerCase();
      out.add(given.get(id) ?? id);
    }
    return [...out];
  }
}
