import { refuseTypeOrmTx } from './caller-transaction-checks';
import { OutboxValidationError } from '../errors/outbox-validation.error';
import { describeValue } from './sql-executor';

/**
 * What the MikroORM executors (PostgreSQL in mikro-orm-executor.ts, MySQL/MariaDB in
 * mikro-orm-mysql.ts) read of MikroORM 6: its EntityManager, and the knex client and knex
 * transactions its SQL drivers run on. One place, so both refuse a caller's `tx` alike.
 */

export const HOW_TO_TX =
  'Pass the EntityManager of your transaction: await em.transactional(async (em) => { …; ' +
  'await outbox.append(events, { tx: em }); }), or a fork after await fork.begin() (before its commit). ' +
  'Or omit tx to let the outbox commit the event in its own transaction.';
export const MIKRO_TX = {
  client: 'MikroORM',
  executorCall: 'mikroOrmExecutor(orm)',
  howTo: HOW_TO_TX,
};

/**
 * The parts of a knex client (MikroORM 6 runs its SQL drivers on knex) the executors use; `C` is
 * the driver's connection (`pg` Client, mysql2 Connection, `mariadb` callback Connection).
 */
export interface KnexClientLike<C = unknown> {
  /** knex's dialect name: `pg`, `mysql2`, `mariadb`. */
  driverName?: string;
  /** The options each pool connection is opened with (for `pg`: a `Client` config). */
  connectionSettings?: unknown;
  acquireConnection(): Promise<C>;
  releaseConnection(connection: C): Promise<unknown>;
}

/** A knex `Transaction`: what MikroORM 6 keeps as an EntityManager's transaction context. */
export interface KnexTransactionLike<C = unknown> {
  /** Hands out the one connection the transaction runs on. */
  client: KnexClientLike<C>;
  isCompleted(): boolean;
}

/** The parts of a MikroORM `EntityManager` the executors use. */
export interface EntityManagerLike {
  getDriver(): object;
  getConnection(type?: 'read' | 'write'): { getKnex(): { client: KnexClientLike } };
  getTransactionContext(): KnexTransactionLike | undefined;
  transactional<T>(
    fn: (em: EntityManagerLike) => Promise<T>,
    options?: { isolationLevel?: string; propagation?: string },
  ): Promise<T>;
}

export function isEntityManager(value: unknown): value is EntityManagerLike {
  const v = value as Record<string, unknown> | null;
  return (
    typeof v === 'object' &&
    v !== null &&
    typeof v.getDriver === 'function' &&
    typeof v.getConnection === 'function' &&
    typeof v.getTransactionContext === 'function' &&
    typeof v.transactional === 'function' &&
    typeof v.fork === 'function'
  );
}

/** A `MikroORM` instance (`await MikroORM.init(…)`): it holds the global `em`. */
export function isOrm(value: unknown): value is { em: EntityManagerLike } {
  const v = value as { em?: unknown; config?: unknown } | null;
  return typeof v === 'object' && v !== null && isEntityManager(v.em) && v.config !== undefined;
}

/** The knex client of the em's write connection, when its driver runs on knex. */
export function knexClientOf(em: EntityManagerLike): KnexClientLike | undefined {
  return em.getConnection('write').getKnex?.()?.client;
}

/** The message for a transaction that already committed or rolled back. */
export const ENDED =
  'is a MikroORM EntityManager whose transaction already committed or rolled back ' +
  `(its em.transactional() callback has returned). ${HOW_TO_TX}`;

/**
 * The knex transaction `tx` runs in, when `tx` is an EntityManager of `em`'s MikroORM instance
 * inside a transaction not yet completed; an `OutboxValidationError` naming `options.tx`
 * otherwise. `driverPackage` names the supported driver in the message for a context that is not
 * a knex transaction. Whether the server still has the transaction open is the caller's check.
 */
export function knexTransactionOf<C>(
  tx: unknown,
  em: EntityManagerLike,
  driverPackage: string,
): KnexTransactionLike<C> {
  refuseTypeOrmTx(tx, MIKRO_TX, (own) => isEntityManager(own));
  if (isOrm(tx)) {
    throw new OutboxValidationError(
      'options.tx',
      `is the MikroORM instance, not a transaction: a write through it commits on its own. ${HOW_TO_TX}`,
    );
  }
  if (!isEntityManager(tx)) {
    throw new OutboxValidationError(
      'options.tx',
      `is not a MikroORM EntityManager, got ${describeValue(tx)}. ${HOW_TO_TX}`,
    );
  }
  if (tx.getDriver() !== em.getDriver()) {
    throw new OutboxValidationError(
      'options.tx',
      `is an EntityManager of another MikroORM instance than the one given to mikroOrmExecutor(orm): it may be on another database. ${HOW_TO_TX}`,
    );
  }
  // (MikroORM resolves the global em to the transaction's fork inside em.transactional().)
  const ctx = tx.getTransactionContext();
  if (ctx === undefined) {
    throw new OutboxValidationError(
      'options.tx',
      'is a MikroORM EntityManager outside any transaction (the global em, or a fork before em.begin() ' +
        `or after its commit), so the event could be committed without your business write. ${HOW_TO_TX}`,
    );
  }
  if (
    typeof ctx.isCompleted !== 'function' ||
    typeof ctx.client?.acquireConnection !== 'function'
  ) {
    throw new OutboxValidationError(
      'options.tx',
      'is a MikroORM EntityManager whose transaction context is not a knex transaction ' +
        `(mikroOrmExecutor supports MikroORM 6 with ${driverPackage}).`,
    );
  }
  if (ctx.isCompleted()) throw new OutboxValidationError('options.tx', ENDED);
  return ctx as KnexTransactionLike<C>;
}

/** The MikroORM instance given to the executor, or an EntityManager of its database. */
export function ownsMikroClient(orm: unknown, em: EntityManagerLike, value: unknown): boolean {
  if (value === orm || value === em) return true;
  return isEntityManager(value) && value.getDriver() === em.getDriver();
}
