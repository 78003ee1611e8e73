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
    const valid: Lease[] = [];
    for (const l of leases) if (isUuid(l.deliveryId)) valid.push(l);
    if (valid.length === 0) return [];
    // Primary-key order: concurrent batches lock rows in one order. (Ids are time-ordered, so
    // a batch acknowledged together is often in that order already: no sort then.)
    if (!inIdOrder(valid)) valid.sort(byDeliveryId);
    const d = this.ctx.dialect;
    const rows: Row[] = [];
    for (let i = 0; i < valid.length; i += ACK_MANY_CHUNK) {
      const chunk = valid.length <= ACK_MANY_CHUNK ? valid : valid.slice(i, i + ACK_MANY_CHUNK);
      rows.push(...(await d.run(() => d.deleteLeased(chunk), d.deleteLeasedRunOptions)));
    }
    // Each row comes back once (a row deleted is gone for the next chunk), reported under the id
    // its caller gave: the row's own unless the caller spelled it in capitals.
    const given = valid.some((l) => l.deliveryId !== l.deliveryId.toLowerCase())
      ? new Map(valid.map((l) => [l.deliveryId.toLowerCase(), l.deliveryId]))
      : null;
    const acked = new Array<string>(rows.length);
    for (let i = 0; i < rows.length; i++) {
      const id = String(rows[i].id).toLowerCase();
      acked[i] = given?.get(id) ?? id;
    }
    return acked;
  }
}

function byDeliveryId(a: Lease, b: Lease): number {
  return a.deliveryId < b.deliveryId ? -1 : a.deliveryId > b.deliveryId ? 1 : 0;
}

function inIdOrder(leases: readonly Lease[]): boolean {
  for (let i = 1; i < leases.length; i++) {
    if (leases[i - 1].deliveryId > leases[i].deliveryId) return false;
  }
  return true;
}
