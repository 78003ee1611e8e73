import { IdempotencyKeyReusedError } from '../errors/idempotency-key-reused.error';
import { InboxInProgressError } from '../errors/inbox-in-progress.error';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import { inboxDialectFor, InboxDialect, InboxStatement, InboxTable } from './dialects';
import { InboxIsolationLevel } from './inbox-options.interface';
import { DEFAULT_LOCK_TIMEOUT_MS } from './inbox-options';

/** Where the inbox table lives. */
export interface InboxTableOptions {
  /** @default 'outbox_' */
  tablePrefix?: string;
  /** PostgreSQL schema / MySQL database. */
  schema?: string;
}

/** Per-run settings of `InboxStore.run`. */
export interface InboxRunOptions {
  isolationLevel?: InboxIsolationLevel;
  /** How long the claim waits for a concurrent claim of the same key. @default 5000 */
  lockTimeoutMs?: number;
  /**
   * Stored with the record; a duplicate whose record has another fingerprint fails with
   * `IdempotencyKeyReusedError` instead of counting as a duplicate.
   */
  fingerprint?: string;
  onTransientRetry?: () => void;
}

export type InboxRunResult<T> = { duplicate: true } | { duplicate: false; value: T };

export interface InboxCleanupResult {
  deleted: number;
  batches: number;
  /** Another runner held the cleanup lock; nothing was deleted. */
  skipped: boolean;
}

// A claim that met a deadlock or serialization failure ran no user code yet, so it is simply
// tried again a few times before the error goes to the caller (and its redelivery).
const CLAIM_ATTEMPTS = 5;
/**
 * Version of the inbox table this code needs. 1: (consumer, message_id, processed_at); 2: adds
 * `fingerprint` (HTTP idempotency keys bound to their request). The version is read from the
 * columns: `ensureSchema` and `createInboxFingerprintMigration()` upgrade 1 → 2.
 */
export const INBOX_SCHEMA_VERSION = 2;
// Bounds one retention run; the next interval continues where this one stopped.
const MAX_BATCHES_PER_RUN = 50;

/**
 * The inbox table of one DataSource: schema, claim-and-run transactions and retention. Holds
 * no state but a queue used on SQLite, where all transactions share one connection.
 */
export class InboxStore {
  readonly dialect: InboxDialect;
  readonly names: InboxTable;
  private queue: Promise<unknown> = Promise.resolve();
  private cleaning = false;
  /** The dialect claims use, once known (`serverDialect`). */
  private claimDialect: InboxDialect | null = null;
  private learning: Promise<InboxDialect> | null = null;

  constructor(
    readonly dataSource: DataSource,
    options: InboxTableOptions = {},
  ) {
    this.dialect = inboxDialectFor(String(dataSource.options.type));
    this.names = this.dialect.tableNames(options.tablePrefix ?? 'outbox_', options.schema);
  }

  /** Creates the table and index if missing (safe to call from several processes). */
  async ensureSchema(): Promise<void> {
    // A table already current costs two reads and no DDL: `CREATE INDEX IF NOT EXISTS` takes a
    // lock before it checks, and would queue a starting replica behind any open inbox transaction.
    if (await this.isCurrent()) return;
    await withRunner(this.dataSource, async (runner) => {
      // Concurrent CREATE … IF NOT EXISTS can still collide in PostgreSQL's catalog; a
      // transaction-scoped advisory lock makes bootstrapping processes take turns.
      const serialize = this.dialect.name === 'postgres';
      if (serialize) {
        await runner.startTransaction();
        await runner.query('SELECT pg_advisory_xact_lock(hashtext($1))', [
          `nestjs-outbox:schema:${this.names.plain}`,
        ]);
        // A lock held by someone else fails startup with an error instead of hanging it.
        await runner.query(`SET LOCAL lock_timeout = '60s'`);
      }
      try {
        for (const sql of this.dialect.createSchema(this.names)) await runner.query(sql);
        if (!(await this.hasFingerprint(runner))) {
          // Version 1 → 2; another process (MySQL, SQLite: not serialized) may have won.
          await runner.query(this.dialect.addFingerprint(this.names)).catch((error: unknown) => {
            if (!this.dialect.isDuplicateColumn(error)) throw error;
          });
        }
        if (serialize) await runner.commitTransaction();
      } catch (error) {
        if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
        throw error;
      }
    });
  }

  private async isCurrent(): Promise<boolean> {
    try {
      await this.dataSource.query(`SELECT 1 FROM ${this.names.table} WHERE 1 = 0`);
      return await withRunner(this.dataSource, (runner) => this.hasFingerprint(runner));
    } catch {
      return false;
    }
  }

  /** Throws `OutboxOptionsError` naming the fix when the inbox table is missing or outdated. */
  async assertSchema(): Promise<void> {
    try {
      await this.dataSource.query(`SELECT 1 FROM ${this.names.table} WHERE 1 = 0`);
    } catch {
      throw new OutboxOptionsError(
        'inbox.ensureSchema',
        `the inbox table ${this.names.plain} does not exist; add createInboxMigration() and ` +
          'createInboxFingerprintMigration() to your migrations and run them, or set inbox.ensureSchema: true',
      );
    }
    if (!(await withRunner(this.dataSource, (runner) => this.hasFingerprint(runner)))) {
      throw new OutboxOptionsError(
        'inbox.ensureSchema',
        `the inbox table ${this.names.plain} is at schema version 1 (no fingerprint column), this ` +
          `version needs ${INBOX_SCHEMA_VERSION}; add createInboxFingerprintMigration() to your ` +
          'migrations and run them, or set inbox.ensureSchema: true',
      );
    }
  }

  /** Whether the table has version 2's fingerprint column. */
  async hasFingerprint(runner: QueryRunner): Promise<boolean> {
    return runner.hasColumn(this.names.plain, 'fingerprint');
  }

  /**
   * Opens a transaction, claims `(consumer, messageId)` and, only if this transaction took it,
   * runs `work` with the transaction's manager and commits. Any failure rolls back the claim
   * together with the work's writes.
   */
  run<T>(
    consumer: string,
    messageId: string,
    work: (manager: EntityManager) => Promise<T>,
    options: InboxRunOptions = {},
  ): Promise<InboxRunResult<T>> {
    const task = () => this.runNow(consumer, messageId, work, options);
    if (!this.dialect.serialTransactions) return task();
    const result = this.queue.then(task, task);
    this.queue = result.catch(() => undefined);
    return result;
  }

  private async runNow<T>(
    consumer: string,
    messageId: string,
    work: (manager: EntityManager) => Promise<T>,
    options: InboxRunOptions,
  ): Promise<InboxRunResult<T>> {
    const lockTimeoutMs = options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS;
    const dialect = this.claimDialect ?? (await this.serverDialect());
    for (let attempt = 1; ; attempt++) {
      const runner = this.dataSource.createQueryRunner('master');
      // A duplicate of a message still being processed waits on its row lock while holding a
      // pooled connection; without a bound, N redeliveries of one long message pin N connections.
      const { bound, claim, restore } = dialect.claim(
        this.names,
        consumer,
        messageId,
        options.fingerprint ?? null,
        lockTimeoutMs,
      );
      let claimed: boolean;
      let bounded = false;
      try {
        await runner.startTransaction(options.isolationLevel);
        if (bound) {
          await runner.query(bound.sql, bound.params);
          bounded = true;
        }
        claimed = (await exec(runner, claim)) > 0;
        bounded = false;
        if (restore) await runner.query(restore.sql, restore.params);
      } catch (error) {
        await rollback(runner);
        if (bounded && restore) {
          await runner.query(restore.sql, restore.params).catch(() => undefined);
        }
        await runner.release();
        if (dialect.isLockTimeout(error)) {
          throw new InboxInProgressError(consumer, messageId, lockTimeoutMs);
        }
        if (attempt < CLAIM_ATTEMPTS && dialect.isTransient(error)) {
          options.onTransientRetry?.();
          await pause(10 * attempt + Math.random() * 20);
          continue;
        }
        throw error;
      }
      try {
        if (!claimed) {
          await runner.rollbackTransaction();
          if (options.fingerprint !== undefined) {
            const read = this.dialect.readFingerprint(this.names, consumer, messageId);
            const rows = (await runner.query(read.sql, read.params)) as { fingerprint: unknown }[];
            const stored = rows[0]?.fingerprint;
            // Records written before version 2, or by non-HTTP consumers, have none to compare.
            if (typeof stored === 'string' && stored !== options.fingerprint) {
              throw new IdempotencyKeyReusedError(consumer, messageId);
            }
          }
          return { duplicate: true };
        }
        const value = await work(runner.manager);
        await runner.commitTransaction();
        return { duplicate: false, value };
      } catch (error) {
        await rollback(runner);
        throw error;
      } finally {
        await runner.release();
      }
    }
  }

  /**
   * The dialect to claim with on this server, asked once (MySQL or MariaDB behind one TypeORM
   * driver); a failed lookup is asked again by the next run.
   */
  private serverDialect(): Promise<InboxDialect> {
    const forServer = this.dialect.forServer;
    if (!forServer) return Promise.resolve((this.claimDialect = this.dialect));
    this.learning ??= this.dataSource
      .query(forServer.sql)
      .then((rows: Record<string, unknown>[]) => (this.claimDialect = forServer.pick(rows)))
      .finally(() => (this.learning = null));
    return this.learning;
  }

  /**
   * Deletes records older than `retentionMs` by the database clock, `batchSize` per statement,
   * each statement its own short transaction. One runner at a time across processes (advisory
   * lock on PostgreSQL, GET_LOCK on MySQL; SQLite is one process).
   */
  async cleanup(retentionMs: number, batchSize: number): Promise<InboxCleanupResult> {
    if (this.cleaning) return { deleted: 0, batches: 0, skipped: true };
    this.cleaning = true;
    try {
      return await withRunner(this.dataSource, async (runner) => {
        const lockName = `nestjs-outbox:inbox-cleanup:${this.names.plain}`;
        const lock = this.dialect.tryLock(lockName);
        if (lock) {
          const rows = (await runner.query(lock.sql, lock.params)) as { locked: unknown }[];
          if (!isTrue(rows[0]?.locked)) return { deleted: 0, batches: 0, skipped: true };
        }
        try {
          let deleted = 0;
          let batches = 0;
          while (batches < MAX_BATCHES_PER_RUN) {
            const count = await exec(
              runner,
              this.dialect.deleteExpired(this.names, retentionMs, batchSize),
            );
            batches++;
            deleted += count;
            if (count < batchSize) break;
          }
          return { deleted, batches, skipped: false };
        } finally {
          const unlock = this.dialect.unlock(lockName);
          if (unlock) await runner.query(unlock.sql, unlock.params);
        }
      });
    } finally {
      this.cleaning = false;
    }
  }

  /** Drops the inbox table (tests and the migration's `down`). */
  async dropSchema(): Promise<void> {
    await withRunner(this.dataSource, async (runner) => {
      for (const sql of this.dialect.dropSchema(this.names)) await runner.query(sql);
    });
  }
}

/** Creates the inbox table and index on a DataSource if they are missing. */
export async function ensureInboxSchema(
  dataSource: DataSource,
  options: InboxTableOptions = {},
): Promise<void> {
  await new InboxStore(dataSource, options).ensureSchema();
}

async function withRunner<T>(dataSource: DataSource, fn: (runner: QueryRunner) => Promise<T>) {
  const runner = dataSource.createQueryRunner('master');
  try {
    return await fn(runner);
  } finally {
    await runner.release();
  }
}

/** Runs a statement and returns the affected row count. */
async function exec(runner: QueryRunner, statement: InboxStatement): Promise<number> {
  const result = await runner.query(statement.sql, statement.params, true);
  return Number(result.affected ?? 0);
}

async function rollback(runner: QueryRunner): Promise<void> {
  // A failed rollback (connection already gone) leaves nothing to undo: the server discards the
  // transaction with the connection.
  if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
}

function isTrue(value: unknown): boolean {
  return value === true || value === 1 || value === '1' || value === 't';
}

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
