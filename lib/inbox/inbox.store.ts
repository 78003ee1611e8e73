import { IdempotencyKeyReusedError } from '../errors/idempotency-key-reused.error';
import { InboxInProgressError } from '../errors/inbox-in-progress.error';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import type { DataSource } from 'typeorm';
import { isSqlExecutor, SqlConnection, SqlExecutor, SqlRows } from '../executors/sql-executor';
import { TypeOrmExecutor } from '../executors/typeorm-executor';
import { inboxDialectOf, InboxDialect, InboxTable } from './dialects';
import type { InboxClaim } from './dialects/inbox-dialect';
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
 * The inbox table behind one executor (a TypeORM DataSource's, or another client's): schema,
 * claim-and-run transactions and retention. Holds no state but a queue used on SQLite, where all
 * transactions share one connection.
 */
export class InboxStore {
  readonly executor: SqlExecutor;
  readonly dialect: InboxDialect;
  readonly names: InboxTable;
  private queue: Promise<unknown> = Promise.resolve();
  private cleaning = false;
  /** The dialect claims use, once known (`serverDialect`). */
  private claimDialect: InboxDialect | null = null;
  private learning: Promise<InboxDialect> | null = null;

  /** `field` names the option that gave `source`, in configuration errors. */
  constructor(
    source: DataSource | SqlExecutor,
    private readonly tableOptions: InboxTableOptions = {},
    field = isSqlExecutor(source) ? 'inbox.executor' : 'inbox.dataSource',
  ) {
    this.executor = isSqlExecutor(source) ? source : new TypeOrmExecutor(source);
    this.dialect = inboxDialectOf(this.executor, field);
    // An executor written against an earlier version of the interface (before @Inbox() used it).
    if (typeof this.executor.clientTransaction !== 'function') {
      throw new OutboxOptionsError(
        field,
        `the ${this.executor.client} executor has no clientTransaction(), which @Inbox() runs its transactions with`,
      );
    }
    this.names = this.dialect.tableNames(
      tableOptions.tablePrefix ?? 'outbox_',
      tableOptions.schema,
    );
  }

  /** Creates the table and index if missing (safe to call from several processes). */
  async ensureSchema(): Promise<void> {
    // A table already current costs two reads and no DDL: `CREATE INDEX IF NOT EXISTS` takes a
    // lock before it checks, and would queue a starting replica behind any open inbox transaction.
    if (await this.isCurrent()) return;
    const create = async (connection: SqlConnection) => {
      for (const sql of this.dialect.createSchema(this.names)) await run(connection, sql);
      if (!(await this.hasFingerprint(connection))) {
        // Version 1 → 2; another process (MySQL, SQLite: not serialized) may have won.
        await run(connection, this.dialect.addFingerprint(this.names)).catch((error: unknown) => {
          if (!this.dialect.isDuplicateColumn(error)) throw error;
        });
      }
    };
    if (this.dialect.name !== 'postgres') return this.executor.connection(create);
    // Concurrent CREATE … IF NOT EXISTS can still collide in PostgreSQL's catalog; a
    // transaction-scoped advisory lock makes bootstrapping processes take turns.
    await this.executor.transaction(async (connection) => {
      await connection.query({
        text: 'SELECT pg_advisory_xact_lock(hashtext($1))',
        params: [`nestjs-outbox:schema:${this.names.plain}`],
      });
      // A lock held by someone else fails startup with an error instead of hanging it.
      await run(connection, `SET LOCAL lock_timeout = '60s'`);
      await create(connection);
    });
  }

  private async isCurrent(): Promise<boolean> {
    try {
      return (await this.schemaVersion()) === INBOX_SCHEMA_VERSION;
    } catch {
      return false;
    }
  }

  /** The table's schema version: `null` when it does not exist, 1 without `fingerprint`, else 2. */
  async schemaVersion(): Promise<number | null> {
    try {
      await run(this.executor, `SELECT 1 FROM ${this.names.table} WHERE 1 = 0`);
    } catch {
      return null;
    }
    return (await this.hasFingerprint()) ? INBOX_SCHEMA_VERSION : 1;
  }

  /**
   * Throws `OutboxOptionsError` naming the fix when the inbox table is missing or outdated;
   * `module` is where the app set `ensureSchema` (`inbox.ensureSchema` of OutboxModule, or
   * InboxModule's own).
   */
  async assertSchema(module: 'OutboxModule' | 'InboxModule' = 'OutboxModule'): Promise<void> {
    const field = module === 'InboxModule' ? 'ensureSchema' : 'inbox.ensureSchema';
    const refuse = (reason: string) => new OutboxOptionsError(field, reason, module);
    // Outside TypeORM there are no migration classes to add: the CLI (or its DDL) is the fix.
    const typeorm = this.executor instanceof TypeOrmExecutor;
    const { tablePrefix = 'outbox_', schema } = this.tableOptions;
    const where =
      (tablePrefix === 'outbox_' ? '' : ` --prefix ${tablePrefix}`) +
      (schema === undefined ? '' : ` --schema ${schema}`);
    const migrate = `run \`npx nestjs-outbox schema migrate --inbox --url <database url>${where}\``;
    const version = await this.schemaVersion();
    if (version === null) {
      throw refuse(
        `the inbox table ${this.names.plain} does not exist; ` +
          (typeorm
            ? 'add createInboxMigration() and createInboxFingerprintMigration() to your migrations and run them'
            : `${migrate}, or add the DDL that \`npx nestjs-outbox schema sql --inbox --dialect ${this.dialect.name}${where}\` prints to your migrations`) +
          `, or set ${field}: true`,
      );
    }
    if (version < INBOX_SCHEMA_VERSION) {
      throw refuse(
        `the inbox table ${this.names.plain} is at schema version 1 (no fingerprint column), this ` +
          `version needs ${INBOX_SCHEMA_VERSION}; ` +
          (typeorm
            ? 'add createInboxFingerprintMigration() to your migrations and run them'
            : migrate) +
          `, or set ${field}: true`,
      );
    }
  }

  /** Whether the table has version 2's fingerprint column (asked of the database's catalog). */
  async hasFingerprint(connection: SqlConnection = this.executor): Promise<boolean> {
    const { sql, params } = this.dialect.hasFingerprint(this.names);
    return (await connection.query({ text: sql, params })).rows.length > 0;
  }

  /**
   * Opens a transaction through the executor's client, claims `(consumer, messageId)` and, only
   * if this transaction took it, runs `work` with the client's transaction object (TypeORM: the
   * EntityManager) and commits. Any failure rolls back the claim together with the work's writes.
   */
  run<T>(
    consumer: string,
    messageId: string,
    work: (tx: any) => Promise<T>,
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
    work: (tx: unknown) => Promise<T>,
    options: InboxRunOptions,
  ): Promise<InboxRunResult<T>> {
    const lockTimeoutMs = options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS;
    const dialect = this.claimDialect ?? (await this.serverDialect());
    for (let attempt = 1; ; attempt++) {
      // A duplicate of a message still being processed waits on its row lock while holding a
      // pooled connection; without a bound, N redeliveries of one long message pin N connections.
      const statements = dialect.claim(
        this.names,
        consumer,
        messageId,
        options.fingerprint ?? null,
        lockTimeoutMs,
      );
      try {
        const value = await this.executor.clientTransaction(
          async (tx, connection) => {
            if (!(await sendClaim(connection, statements))) throw NOT_CLAIMED;
            return work(tx);
          },
          { isolation: options.isolationLevel },
        );
        return { duplicate: false, value };
      } catch (error) {
        if (error === NOT_CLAIMED) {
          if (options.fingerprint !== undefined) {
            const read = this.dialect.readFingerprint(this.names, consumer, messageId);
            const { rows } = await this.executor.query({ text: read.sql, params: read.params });
            const stored: unknown = rows[0]?.fingerprint;
            // Records written before version 2, or by non-HTTP consumers, have none to compare.
            if (typeof stored === 'string' && stored !== options.fingerprint) {
              throw new IdempotencyKeyReusedError(consumer, messageId);
            }
          }
          return { duplicate: true };
        }
        if (!(error instanceof ClaimFailed)) throw error;
        if (dialect.isLockTimeout(error.cause)) {
          throw new InboxInProgressError(consumer, messageId, lockTimeoutMs);
        }
        if (attempt < CLAIM_ATTEMPTS && dialect.isTransient(error.cause)) {
          options.onTransientRetry?.();
          await pause(10 * attempt + Math.random() * 20);
          continue;
        }
        throw error.cause;
      }
    }
  }

  /**
   * The dialect to claim with on this server, asked once (MySQL or MariaDB behind one client);
   * a failed lookup is asked again by the next run.
   */
  private serverDialect(): Promise<InboxDialect> {
    const forServer = this.dialect.forServer;
    if (!forServer) return Promise.resolve((this.claimDialect = this.dialect));
    this.learning ??= run(this.executor, forServer.sql)
      .then(({ rows }) => (this.claimDialect = forServer.pick(rows)))
      .finally(() => (this.learning = null));
    return this.learning;
  }

  /**
   * Deletes records older than `retentionMs` by the database clock, `batchSize` per statement,
   * each statement its own short transaction. One runner at a time across processes (advisory
   * lock on PostgreSQL, GET_LOCK on MySQL; SQLite is one process), held on one connection.
   */
  async cleanup(retentionMs: number, batchSize: number): Promise<InboxCleanupResult> {
    if (this.cleaning) return { deleted: 0, batches: 0, skipped: true };
    this.cleaning = true;
    try {
      return await this.executor.connection(async (connection) => {
        const lockName = `nestjs-outbox:inbox-cleanup:${this.names.plain}`;
        const lock = this.dialect.tryLock(lockName);
        if (lock) {
          const { rows } = await connection.query({ text: lock.sql, params: lock.params });
          if (!isTrue(rows[0]?.locked)) return { deleted: 0, batches: 0, skipped: true };
        }
        try {
          let deleted = 0;
          let batches = 0;
          while (batches < MAX_BATCHES_PER_RUN) {
            const expired = this.dialect.deleteExpired(this.names, retentionMs, batchSize);
            const { affected: count } = await connection.query({
              text: expired.sql,
              params: expired.params,
            });
            batches++;
            deleted += count;
            if (count < batchSize) break;
          }
          return { deleted, batches, skipped: false };
        } finally {
          const unlock = this.dialect.unlock(lockName);
          if (unlock) await connection.query({ text: unlock.sql, params: unlock.params });
        }
      });
    } finally {
      this.cleaning = false;
    }
  }

  /** Drops the inbox table (tests and the migration's `down`). */
  async dropSchema(): Promise<void> {
    await this.executor.connection(async (connection) => {
      for (const sql of this.dialect.dropSchema(this.names)) await run(connection, sql);
    });
  }
}

/** Creates the inbox table and index through a DataSource or an executor if they are missing. */
export async function ensureInboxSchema(
  source: DataSource | SqlExecutor,
  options: InboxTableOptions = {},
): Promise<void> {
  await new InboxStore(source, options).ensureSchema();
}

/** The claim found the message already processed: its transaction rolls back, nothing ran. */
const NOT_CLAIMED = Symbol('inbox: not claimed');

/** The claim itself failed (before any user code): the run decides whether to try again. */
class ClaimFailed {
  constructor(readonly cause: unknown) {}
}

/**
 * Sends a claim (and its bound and restore) in the open transaction; true when it took the key.
 * A failed claim still gets the bound's setting back before its transaction rolls back.
 */
async function sendClaim(connection: SqlConnection, statements: InboxClaim): Promise<boolean> {
  const { bound, claim, restore } = statements;
  let bounded = false;
  try {
    if (bound) {
      await connection.query({ text: bound.sql, params: bound.params });
      bounded = true;
    }
    const { affected } = await connection.query({ text: claim.sql, params: claim.params });
    bounded = false;
    if (restore) await connection.query({ text: restore.sql, params: restore.params });
    return affected > 0;
  } catch (error) {
    if (bounded && restore) {
      await connection.query({ text: restore.sql, params: restore.params }).catch(() => undefined);
    }
    throw new ClaimFailed(error);
  }
}

/** A statement without parameters. */
function run(connection: SqlConnection, sql: string): Promise<SqlRows> {
  return connection.query({ text: sql, params: [] });
}

function isTrue(value: unknown): boolean {
  return value === true || value === 1 || value === '1' || value === 't';
}

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
