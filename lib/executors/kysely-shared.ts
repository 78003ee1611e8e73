import { refuseTypeOrmTx } from './caller-transaction-checks';
import { OutboxValidationError } from '../errors/outbox-validation.error';
import { describeValue, SqlIsolationLevel, SqlStatement } from './sql-executor';

/*
 * What the Kysely executors share, on every dialect (kysely-executor.ts: PostgreSQL;
 * kysely-mysql.ts: MySQL/MariaDB): the parts of Kysely they use, and how a caller's `Transaction`
 * is recognised and refused. Its own module, so the dialects' files do not import each other.
 */

/** A compiled query as Kysely runs it (`CompiledQuery.raw(sql, parameters)`). */
export type KyselyCompiledQuery = object;

/** Kysely's spelling of the isolation levels. */
export type KyselyIsolationLevel = Lowercase<SqlIsolationLevel>;

/** The parts of a `Kysely` (root, connection or `Transaction`) the executor uses. */
export interface KyselyLike {
  readonly isTransaction: boolean;
  executeQuery(query: KyselyCompiledQuery): Promise<{
    rows: Array<Record<string, any>>;
    numAffectedRows?: bigint;
  }>;
  getExecutor(): { adapter: object };
  withoutPlugins(): KyselyLike;
  transaction(): {
    setIsolationLevel(level: KyselyIsolationLevel): ReturnType<KyselyLike['transaction']>;
    execute<T>(fn: (trx: KyselyLike) => Promise<T>): Promise<T>;
  };
  connection(): { execute<T>(fn: (db: KyselyLike) => Promise<T>): Promise<T> };
  /** `ControlledTransaction` (`db.startTransaction().execute()`) only. */
  readonly isCommitted?: boolean;
  readonly isRolledBack?: boolean;
}

export const HOW_TO_TX =
  'Pass the trx of your Kysely transaction: await db.transaction().execute(async (trx) => { … ' +
  'append(events, { tx: trx }) … }), or a db.startTransaction().execute() before its commit. ' +
  'Or omit tx to let the outbox commit the event in its own transaction.';
export const KYSELY_TX = { client: 'Kysely', executorCall: 'kyselyExecutor(db)', howTo: HOW_TO_TX };

export function raw(statement: SqlStatement): KyselyCompiledQuery {
  const { CompiledQuery } = require('kysely') as typeof import('kysely');
  return CompiledQuery.raw(statement.text, statement.params as unknown[]);
}

export function transactionBuilder(db: KyselyLike, isolation: SqlIsolationLevel | undefined) {
  const builder = db.transaction();
  return isolation
    ? builder.setIsolationLevel(isolation.toLowerCase() as KyselyIsolationLevel)
    : builder;
}

/** Kysely's refusal of a statement in a `Transaction` that committed or rolled back. */
export function isEndedTransactionError(error: unknown): boolean {
  return /Transaction is already (committed|rolled back)/.test(String((error as Error)?.message));
}

/**
 * `tx` as a Kysely `Transaction` of `db` (of any dialect), or the refusal that says what to pass:
 * not a Kysely object, a Kysely outside any transaction, another Kysely instance's transaction, or
 * a `ControlledTransaction` that committed or rolled back. Whether the server still holds the
 * transaction open is the dialect's own check.
 */
export function kyselyTransactionOf(tx: unknown, db: KyselyLike): KyselyLike {
  const t = tx as Record<string, unknown> | null;
  // A Kysely instance has startTransaction() too; its own objects have getExecutor().
  refuseTypeOrmTx(tx, KYSELY_TX, (own) => typeof own.getExecutor === 'function');
  if (
    typeof t !== 'object' ||
    t === null ||
    typeof t.executeQuery !== 'function' ||
    typeof t.getExecutor !== 'function' ||
    typeof t.isTransaction !== 'boolean'
  ) {
    throw new OutboxValidationError(
      'options.tx',
      `is not a Kysely Transaction, got ${describeValue(tx)}. ${HOW_TO_TX}`,
    );
  }
  const trx = t as unknown as KyselyLike;
  if (!trx.isTransaction) {
    throw new OutboxValidationError(
      'options.tx',
      'is a Kysely instance outside any transaction (isTransaction is false: the root db, or a ' +
        `db.connection()), so the event could be committed without your business write. ${HOW_TO_TX}`,
    );
  }
  if (trx.getExecutor().adapter !== db.getExecutor().adapter) {
    throw new OutboxValidationError(
      'options.tx',
      `is a transaction of another Kysely instance than the one given to kyselyExecutor(db): it may be on another database. ${HOW_TO_TX}`,
    );
  }
  return trx;
}
