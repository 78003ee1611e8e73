import { OutboxValidationError } from '../errors/outbox-validation.error';

/**
 * Checks every non-TypeORM executor makes of the `tx` a caller passes (docs/stores.md "Without TypeORM"):
 * one place for the refusals they share, so they say the same thing the same way.
 */

/** Which executor refuses, for its messages. */
export interface TxRefusalContext {
  /** The client, as users name it: `node-postgres`, `Drizzle`, `Kysely`. */
  client: string;
  /** The store option that selects it: `pgExecutor(pool)`. */
  executorCall: string;
  /** How to pass this client's transaction instead. */
  howTo: string;
}

/**
 * Refuses a TypeORM `EntityManager` or `QueryRunner` given as `tx` to a store that writes through
 * another client: it would not join that transaction. `isOwn` exempts the client's own objects that
 * happen to look alike (Kysely has `startTransaction()` too).
 */
export function refuseTypeOrmTx(
  tx: unknown,
  context: TxRefusalContext,
  isOwn: (tx: Record<string, unknown>) => boolean = () => false,
): void {
  if (typeof tx !== 'object' || tx === null) return;
  const t = tx as Record<string, unknown>;
  const looksLikeTypeOrm =
    typeof t.startTransaction === 'function' ||
    (typeof t.transaction === 'function' && typeof t.getRepository === 'function');
  if (!looksLikeTypeOrm || isOwn(t)) return;
  throw new OutboxValidationError(
    'options.tx',
    `is a TypeORM EntityManager or QueryRunner, but this outbox store writes through ${context.client} ` +
      `(store: { type: 'sql', executor: ${context.executorCall} }), outside TypeORM's transactions. ` +
      `${context.howTo} To join TypeORM transactions, use store: { type: 'typeorm', dataSource } and pass { manager }.`,
  );
}

/**
 * Refuses a connection whose PostgreSQL transaction status is not "in a transaction" (`T`): a
 * failed one (`E`) can only roll back; one outside a transaction (`I`) would commit the event
 * without the caller's write. `notOpen` says, in this client's words, why it is not open.
 */
export function requireOpenTransaction(status: string, notOpen: string): void {
  if (status === 'E') {
    throw new OutboxValidationError(
      'options.tx',
      'is inside a failed transaction (a statement of it failed); it can only roll back. Nothing was written.',
    );
  }
  if (status !== 'T') throw new OutboxValidationError('options.tx', notOpen);
}
