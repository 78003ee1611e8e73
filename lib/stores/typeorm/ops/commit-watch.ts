import type { QueryRunner } from 'typeorm';
import { OutboxValidationError } from '../../../errors/outbox-validation.error';
import { AppendListeners } from '../../store-helpers';
import { CoalescedSignal } from '../../wakeups';
import { PostgresWakeups } from '../dialects/postgres/wakeups';
import { StoreContext } from './context';

/**
 * Who hears of committed appends: listeners in this process (the dispatcher's wake-up), other
 * processes (PostgreSQL NOTIFY / LISTEN, README "Wake-ups") and the claim's placeholder probe.
 * Appends in the store's own transaction are committed when `append` returns; those in a caller's
 * transaction are reported when TypeORM says that transaction committed.
 */
export class CommitWatch {
  private readonly appendListeners = new AppendListeners();
  /** Caller transactions holding appends, and whether those include placeholders. */
  private readonly awaitingCommit = new WeakMap<QueryRunner, boolean>();
  private commitHook: object | null = null;
  /** PostgreSQL only: NOTIFY / LISTEN between processes. */
  private readonly wakeups: PostgresWakeups | null;
  /** Set by `publishWakeups`: signals other processes after appends commit. */
  private wakeupSignal: CoalescedSignal | null = null;
  private readonly wakeupListeners = new Set<() => Promise<void>>();

  constructor(private readonly ctx: StoreContext) {
    const { dialect, dataSource, options } = ctx;
    this.wakeups =
      dialect.name === 'postgres'
        ? new PostgresWakeups(dataSource, dialect.tables.prefix, dialect.tables.schema, (error) =>
            options.onWakeupError?.(error),
          )
        : null;
  }

  /** The open transaction a caller's EntityManager or QueryRunner belongs to, or a clear refusal. */
  transactionOf(manager: unknown): QueryRunner {
    const m = manager as Partial<QueryRunner> & { queryRunner?: QueryRunner };
    const runner: QueryRunner | undefined =
      typeof m?.startTransaction === 'function' && typeof m.query === 'function'
        ? (m as QueryRunner)
        : m?.queryRunner;
    const isManager =
      typeof m === 'object' &&
      m !== null &&
      typeof (m as { transaction?: unknown }).transaction === 'function' &&
      typeof m.query === 'function';
    const isDataSource =
      typeof m === 'object' &&
      m !== null &&
      typeof (m as { createQueryRunner?: unknown }).createQueryRunner === 'function' &&
      'isInitialized' in m;
    if (isDataSource) {
      throw new OutboxValidationError(
        'options.manager',
        'is a DataSource, not the EntityManager of an open transaction: pass the manager that ' +
          'dataSource.transaction(async (manager) => { ... }) gives its callback, or omit manager ' +
          'to let the outbox commit the event in its own transaction.',
      );
    }
    if (!runner && !isManager) {
      throw new OutboxValidationError(
        'options.manager',
        `is not a TypeORM EntityManager (or QueryRunner), got ${describeValue(manager)}. ` +
          'Pass the EntityManager that dataSource.transaction(async (manager) => { ... }) gives its callback, ' +
          'or queryRunner.manager (or the QueryRunner) after await queryRunner.startTransaction(); ' +
          'or omit manager to let the outbox commit the event in its own transaction.',
      );
    }
    if (!runner || !runner.isTransactionActive || runner.isReleased) {
      throw new OutboxValidationError(
        'options.manager',
        'is not inside an open transaction, so the event could be committed without your business write. ' +
          'Pass the EntityManager that dataSource.transaction(async (manager) => { ... }) gives its callback, ' +
          'or queryRunner.manager (or the QueryRunner) after await queryRunner.startTransaction(); ' +
          'or omit manager to let the outbox commit the event in its own transaction.',
      );
    }
    const owner =
      (runner as { dataSource?: unknown; connection?: unknown }).dataSource ?? runner.connection;
    if (owner !== this.ctx.dataSource) {
      throw new OutboxValidationError(
        'options.manager',
        'belongs to a different DataSource than the outbox store; use a transaction of the DataSource given in store.dataSource',
      );
    }
    return runner;
  }

  /**
   * An append returned: in the store's own transaction (`runner` null) it is committed now; in a
   * caller's, the commit hook reports it when that transaction commits.
   */
  appendedBy(runner: QueryRunner | null, placeholders: boolean): void {
    if (runner && this.commitHook) {
      this.awaitingCommit.set(runner, placeholders || this.awaitingCommit.get(runner) === true);
    } else if (!runner) {
      this.appended(placeholders);
    }
  }

  /**
   * Appends are committed: wake listeners and other processes, and look for new placeholders on
   * the next claim.
   */
  private appended(placeholders: boolean): void {
    // A claim that ran while they were uncommitted may have started a quiet period.
    if (placeholders) this.ctx.expandQuietUntil = 0;
    this.appendListeners.notify();
    this.wakeupSignal?.signal();
  }

  /**
   * PostgreSQL: after appends commit, NOTIFY other processes (coalesced, outside the producer's
   * transaction; a rollback sends nothing). MySQL/MariaDB and SQLite have no such channel.
   */
  publishWakeups(): void {
    const wakeups = this.wakeups;
    if (!wakeups || this.wakeupSignal) return;
    this.wakeupSignal = new CoalescedSignal(
      () => wakeups.notify(),
      (error) => this.ctx.options.onWakeupError?.(error),
    );
    this.installCommitHook();
  }

  /**
   * PostgreSQL: listens for other processes' commits on one dedicated connection. A wake-up also
   * ends the quiet period of the placeholder probe, so events of types the producer has no
   * handler for are expanded by the next claim. Other dialects: never calls `listener`.
   */
  onWakeup(listener: () => void): () => Promise<void> {
    if (!this.wakeups) return () => Promise.resolve();
    const stop = this.wakeups.listen(() => {
      this.ctx.expandQuietUntil = 0;
      listener();
    });
    this.wakeupListeners.add(stop);
    return () => {
      this.wakeupListeners.delete(stop);
      return stop();
    };
  }

  /**
   * The NOTIFY channel of this outbox (PostgreSQL), `null` elsewhere and, without a configured
   * schema, until `resolveWakeupChannel()` (or the first signal) read `current_schema()`.
   */
  get wakeupChannel(): string | null {
    return this.wakeups?.channel ?? null;
  }

  /** PostgreSQL: the channel of the schema the tables are in; `null` elsewhere. */
  async resolveWakeupChannel(): Promise<string | null> {
    return this.wakeups ? this.wakeups.resolveChannel() : null;
  }

  /** Stops signalling and listening, and leaves nothing behind on the DataSource. */
  async close(): Promise<void> {
    this.wakeupSignal?.close();
    this.wakeupSignal = null;
    await Promise.all([...this.wakeupListeners].map((stop) => stop()));
    this.wakeupListeners.clear();
    if (this.appendListeners.size === 0) this.removeCommitHook();
  }

  /**
   * Listeners hear of appends once they are committed: at once for the store's own transaction,
   * and through a TypeORM subscriber (`afterTransactionCommit`) for the caller's.
   */
  onAppended(listener: () => void): () => void {
    this.installCommitHook();
    // The DataSource may outlive this store (tests, several apps): leave nothing behind on it.
    return this.appendListeners.add(listener, () => {
      if (!this.wakeupSignal) this.removeCommitHook();
    });
  }

  private installCommitHook(): void {
    if (!this.commitHook) {
      this.commitHook = {
        afterTransactionCommit: (event: { queryRunner?: QueryRunner }) => {
          const runner = event.queryRunner;
          // A released savepoint also reports a commit; only the outermost one counts.
          if (!runner || runner.isTransactionActive || !this.awaitingCommit.has(runner)) return;
          const placeholders = this.awaitingCommit.get(runner) === true;
          this.awaitingCommit.delete(runner);
          this.appended(placeholders);
        },
        afterTransactionRollback: (event: { queryRunner?: QueryRunner }) => {
          if (event.queryRunner && !event.queryRunner.isTransactionActive) {
            this.awaitingCommit.delete(event.queryRunner);
          }
        },
      };
      this.ctx.dataSource.subscribers.push(this.commitHook as never);
    }
  }

  private removeCommitHook(): void {
    const index = this.commitHook
      ? this.ctx.dataSource.subscribers.indexOf(this.commitHook as never)
      : -1;
    if (index >= 0) this.ctx.dataSource.subscribers.splice(index, 1);
    this.commitHook = null;
  }
}

function describeValue(value: unknown): string {
  if (typeof value !== 'object' || value === null) return JSON.stringify(value) ?? typeof value;
  const name = (value as object).constructor?.name;
  return name && name !== 'Object' ? `an instance of ${name}` : 'a plain object';
}
