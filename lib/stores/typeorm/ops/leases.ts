import { LeaseLostError } from '../../../errors/lease-lost.error';
import {
  DeadLetterReason,
  DeliveryErrorInput,
  Lease,
} from '../../../interfaces/outbox-store.interface';
import { OUTBOX_ERROR_HISTORY } from '../../../outbox.constants';
import { isUuid } from '../../../outbox-validation';
import { Plan, Row } from '../dialects/sql-dialect';
import { raw, sql, SqlText } from '../sql';
import { StoreContext } from './context';

/** Column list of the dead letters table, in the order `moveRows` fills it. */
const DEAD_COLUMNS =
  'id, event_seq, event_type, event_key, handler, attempts, reason, errors, dead_at';

/** Longest stack stored (the `errorStacks.maxLength` option's ceiling). */
const MAX_STACK_LENGTH = 16_384;

/** Longest retry delay written (100 years); beyond it the databases' date arithmetic overflows. */
const MAX_RETRY_DELAY_MS = 100 * 365 * 86_400_000;

/**
 * Operations on one held lease: renew, retry, release, dead-letter. Each is fenced: it changes
 * the row only while the lease (owner, token) still holds and is live, and reports a lost lease
 * otherwise.
 */
export class LeaseOps {
  constructor(private readonly ctx: StoreContext) {}

  private fenced(lease: Lease): SqlText {
    return sql`id = ${lease.deliveryId} AND status = 'leased' AND lease_owner = ${lease.owner} AND lease_token = ${lease.token} AND lease_until > ${this.ctx.dialect.now}`;
  }

  private async settle(lease: Lease, set: SqlText): Promise<void> {
    if (!isUuid(lease.deliveryId)) throw new LeaseLostError(lease.deliveryId, lease.owner);
    const { affected } = await this.ctx.one(
      sql`UPDATE ${this.ctx.D} ${this.ctx.dialect.byId} SET ${set}, lease_owner = NULL, lease_token = NULL, lease_until = NULL WHERE ${this.fenced(lease)}`,
    );
    if (affected === 0) throw new LeaseLostError(lease.deliveryId, lease.owner);
  }

  async renew(lease: Lease, leaseMs: number): Promise<Lease> {
    if (!isUuid(lease.deliveryId)) throw new LeaseLostError(lease.deliveryId, lease.owner);
    const d = this.ctx.dialect;
    const D = this.ctx.D;
    const update = sql`UPDATE ${D} ${d.byId} SET lease_until = ${d.plusMs(d.now, leaseMs)} WHERE ${this.fenced(lease)}`;
    const until = d.timeOut(raw('lease_until'));
    const check = sql`SELECT ${until} AS lease_until FROM ${D} ${d.byId} WHERE id = ${lease.deliveryId} AND status = 'leased' AND lease_owner = ${lease.owner} AND lease_token = ${lease.token}`;
    const rows = await d.run(function* (): Plan<Row[]> {
      if (d.updateReturning) return (yield sql`${update} RETURNING ${until} AS lease_until`).rows;
      if ((yield update).affected === 0) return [];
      return (yield check).rows;
    });
    if (rows.length === 0) throw new LeaseLostError(lease.deliveryId, lease.owner);
    return { ...lease, leaseUntil: d.readTime(rows[0].lease_until) };
  }

  retry(lease: Lease, delayMs: number, error: DeliveryErrorInput): Promise<void> {
    const d = this.ctx.dialect;
    return this.settle(
      lease,
      sql`status = 'pending', available_at = ${d.plusMs(d.now, retryDelay(delayMs))}, errors = ${this.errorEntry(error)}`,
    );
  }

  /** Moves the delivery to the dead letters (fenced: only while the lease holds). */
  async deadLetter(
    lease: Lease,
    reason: DeadLetterReason,
    error: DeliveryErrorInput,
  ): Promise<void> {
    if (!isUuid(lease.deliveryId)) throw new LeaseLostError(lease.deliveryId, lease.owner);
    const d = this.ctx.dialect;
    const moved = await d.run(
      () =>
        d.moveRows({
          from: this.ctx.D,
          to: this.ctx.DL,
          where: this.fenced(lease),
          columns: DEAD_COLUMNS,
          values: sql`id, event_seq, event_type, event_key, handler, attempts, ${reason}, ${this.errorEntry(error)}, ${d.now}`,
        }),
      d.moveRunOptions,
    );
    if (moved.length === 0) throw new LeaseLostError(lease.deliveryId, lease.owner);
  }

  release(lease: Lease): Promise<void> {
    return this.settle(
      lease,
      sql`status = 'pending', attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, available_at = ${this.ctx.dialect.now}`,
    );
  }

  private errorEntry(error: DeliveryErrorInput): SqlText {
    return this.ctx.dialect.appendError(
      raw('errors'),
      {
        name: withoutNul(error.name ?? 'Error').slice(0, 255),
        message: withoutNul(error.message ?? '').slice(0, this.ctx.errorMaxLength),
        attempt: Math.floor(Number(error.attempt) || 0),
        workerId: withoutNul(error.workerId ?? '').slice(0, 255),
        ...(typeof error.stack === 'string'
          ? { stack: withoutNul(error.stack).slice(0, MAX_STACK_LENGTH) }
          : {}),
      },
      OUTBOX_ERROR_HISTORY,
    );
  }
}

/**
 * Error text without NUL characters: PostgreSQL text and jsonb cannot hold U+0000 (the whole
 * statement would fail and the outcome would be lost); stripped on every dialect alike.
 */
function withoutNul(value: unknown): string {
  return String(value).replaceAll('\u0000', '');
}

/** A retry delay the database accepts: NaN, infinite or negative delays mean "now". */
function retryDelay(delayMs: number): number {
  const ms = Number(delayMs);
  return Number.isFinite(ms) && ms > 0 ? Math.min(ms, MAX_RETRY_DELAY_MS) : 0;
}
