import type { CallerTransaction, SqlConnection } from '../../../executors/sql-executor';
import { AppendListeners } from '../../store-helpers';
import { CoalescedSignal } from '../../wakeups';
import { PostgresWakeups } from '../dialects/postgres/wakeups';
import { StoreContext } from './context';

/**
 * Who hears of committed appends: listeners in this process (the dispatcher's wake-up), other
 * processes (PostgreSQL NOTIFY / LISTEN, docs/wakeups.md) and the claim's placeholder probe.
 * Appends in the store's own transaction are committed when `append` returns; those in a caller's
 * transaction are reported when the executor says that transaction committed (TypeORM's
 * subscribers). An executor that cannot (node-postgres) gets a NOTIFY inside the caller's
 * transaction instead, which PostgreSQL delivers at commit and drops on rollback (`inTransaction`).
 */
export class CommitWatch {
  private readonly appendListeners = new AppendListeners();
  /** Caller transactions holding appends, and whether those include placeholders. */
  private readonly awaitingCommit = new WeakMap<object, boolean>();
  /** Stops the executor's commit reports; set while they are watched. */
  private commitHook: (() => void) | null = null;
  /** PostgreSQL only: NOTIFY / LISTEN between processes. */
  private readonly wakeups: PostgresWakeups | null;
  /** Set by `publishWakeups`: signals other processes after appends commit. */
  private wakeupSignal: CoalescedSignal | null = null;
  private readonly wakeupListeners = new Set<() => Promise<void>>();

  constructor(private readonly ctx: StoreContext) {
    const { dialect, executor, options } = ctx;
    this.wakeups =
      dialect.name === 'postgres'
        ? new PostgresWakeups(executor, dialect.tables.prefix, dialect.tables.schema, (error) =>
            options.onWakeupError?.(error),
          )
        : null;
  }

  /**
   * The caller's open transaction `tx` belongs to, as the executor recognises it (a TypeORM
   * EntityManager or QueryRunner, a pg PoolClient after BEGIN, …), or a clear refusal.
   */
  transactionOf(tx: unknown): Promise<CallerTransaction> {
    return this.ctx.executor.transactionOf(tx);
  }

  /** Whether the executor reports commits of callers' transactions (TypeORM does). */
  get hearsCommits(): boolean {
    return typeof this.ctx.executor.watchCommits === 'function';
  }

  /**
   * An executor that cannot report commits (node-postgres): appends in a caller's transaction
   * NOTIFY inside it, when this store publishes wake-ups and anyone listens (this process's
   * dispatcher included). PostgreSQL delivers the NOTIFY when that transaction commits, nothing
   * when it rolls back. Elsewhere the dispatcher's poll finds the events.
   */
  async inTransaction(connection: SqlConnection): Promise<void> {
    if (this.hearsCommits || !this.wakeups || !this.wakeupSignal) return;
    await this.wakeups.notifyIn(connection);
  }

  /**
   * An append returned: in the store's own transaction (`runner` null) it is committed now; in a
   * caller's, the commit hook reports it when that transaction commits.
   */
  appendedBy(caller: CallerTransaction | null, placeholders: boolean): void {
    const runner = caller?.key;
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
    if (this.commitHook || !this.ctx.executor.watchCommits) return;
    this.commitHook = this.ctx.executor.watchCommits({
      committed: (key) => {
        if (!this.awaitingCommit.has(key)) return;
        const placeholders = this.awaitingCommit.get(key) === true;
        this.awaitingCommit.delete(key);
        this.appended(placeholders);
      },
      rolledBack: (key) => {
        this.awaitingCommit.delete(key);
      },
    });
  }

  private removeCommitHook(): void {
    this.commitHook?.();
    this.commitHook = null;
  }
}
