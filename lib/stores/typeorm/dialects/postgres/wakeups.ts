import { createHash, randomBytes } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { isSqlExecutor, SqlConnection, SqlExecutor } from '../../../../executors/sql-executor';
import { TypeOrmExecutor } from '../../../../executors/typeorm-executor';
import { reconnectDelay } from '../../../wakeups';

/** The part of a `pg` Client the wake-up listener uses. */
interface PgListenClient {
  connect(): Promise<unknown>;
  query(text: string, values?: unknown[]): Promise<{ rows?: Array<Record<string, unknown>> }>;
  end(): Promise<unknown>;
  on(
    event: 'notification',
    listener: (message: { channel: string; payload?: string }) => void,
  ): unknown;
  on(event: 'error' | 'end', listener: (error?: unknown) => void): unknown;
  removeAllListeners(event?: string): unknown;
}

/** `application_name` of the listening connection, so it can be found in `pg_stat_activity`. */
export const WAKEUP_APPLICATION_NAME = 'nestjs-outbox wake-ups';

/**
 * The NOTIFY channel of one outbox (the schema its tables are in + table prefix): a lowercase
 * identifier of at most 63 characters, readable, with a hash of both so distinct outboxes never
 * share a channel. `schema` is the effective one (`current_schema()` when none is configured).
 */
export function wakeupChannel(prefix: string, schema: string | null): string {
  const readable = `${schema ? `${schema}_` : ''}${prefix}wake`.toLowerCase().slice(0, 50);
  const hash = createHash('sha1')
    .update(`${schema ?? ''}.${prefix}`)
    .digest('hex')
    .slice(0, 8);
  return `${readable}_${hash}`;
}

/**
 * How long a producer trusts a look that found no other listener (ms): a process that starts
 * listening is signalled at most this long after it took the lock.
 */
export const WAKEUP_LISTENERS_TTL_MS = 1_000;
/**
 * How long a producer trusts a look that found one (ms): a stale "yes" costs only NOTIFYs nobody
 * hears, so `pg_locks` — which copies the server's whole lock table — is read rarely.
 */
export const WAKEUP_LISTENING_TTL_MS = 30_000;

/**
 * The advisory lock (two int4 keys, both non-negative) that every connection listening on
 * `channel` holds in shared mode while it listens: how a producer sees, in `pg_locks`, whether
 * any process is listening at all. `LISTEN` itself leaves no trace another session can read.
 */
export function wakeupListenerLock(channel: string): [number, number] {
  const digest = createHash('sha1').update(`nestjs-outbox listeners:${channel}`).digest();
  return [digest.readUInt32BE(0) & 0x7fffffff, digest.readUInt32BE(4) & 0x7fffffff];
}

/**
 * PostgreSQL wake-ups: `pg_notify` on a pooled connection after a commit (never inside the
 * producer's transaction, so commits are not serialised behind the NOTIFY queue lock), and
 * `LISTEN` on one dedicated `pg` Client per subscriber, built from the executor's connection
 * options (the DataSource's, the pg Pool's) — a pooled connection could be handed to a claim, or
 * recycled by the pool.
 */
export class PostgresWakeups {
  /**
   * Sent as the payload so this store's own listener can skip its own signals (its dispatcher
   * heard of those commits in-process already). Not trusted for anything else.
   */
  private readonly origin = randomBytes(6).toString('hex');
  /** The channel and its listener lock, once the schema the tables live in is known. */
  private named: { channel: string; lock: [number, number] } | null = null;
  private naming: Promise<{ channel: string; lock: [number, number] }> | null = null;
  /** Backend pids of this store's own listening connections (its dispatcher hears in-process). */
  private readonly ownListeners = new Set<number>();
  /** The last look at `pg_locks`: whether another connection listens, and when it was taken. */
  private others: { listening: boolean; at: number } | null = null;
  private looking: Promise<boolean> | null = null;
  /** NOTIFYs sent, and skipped because no one else listened. */
  readonly counts = { sent: 0, skipped: 0 };

  /**
   * `schema` is the configured one; without it the tables live in the connection's
   * `current_schema()`, read once before the first signal, so a process configured with
   * `schema: 'public'` and one with none share a channel when they share the tables.
   */
  private readonly executor: SqlExecutor;

  constructor(
    source: SqlExecutor | DataSource,
    private readonly prefix: string,
    schema: string | null,
    private readonly onError: (error: unknown) => void,
    private readonly clock: () => number = () => performance.now(),
  ) {
    this.executor = isSqlExecutor(source) ? source : new TypeOrmExecutor(source);
    if (schema !== null) this.named = PostgresWakeups.names(prefix, schema);
  }

  /** Rows of one statement on a pooled connection of the executor. */
  private async rows<T>(text: string, params: unknown[] = []): Promise<T[]> {
    return (await this.executor.query({ text, params })).rows as T[];
  }

  /** The channel, once resolved (at construction with a configured schema), else `null`. */
  get channel(): string | null {
    return this.named?.channel ?? null;
  }

  /** The channel of the schema the tables are in (one read of `current_schema()` if needed). */
  resolveChannel(): Promise<string> {
    return this.resolve().then((named) => named.channel);
  }

  private resolve(): Promise<{ channel: string; lock: [number, number] }> {
    if (this.named) return Promise.resolve(this.named);
    this.naming ??= this.currentSchema().then(
      (schema) => (this.named = PostgresWakeups.names(this.prefix, schema)),
      (error: unknown) => {
        this.naming = null;
        throw error;
      },
    );
    return this.naming;
  }

  private async currentSchema(): Promise<string> {
    const rows = await this.rows<{ schema: string | null }>('SELECT current_schema() AS schema');
    const schema = rows[0]?.schema;
    if (!schema) throw new Error('current_schema() is null: the search_path names no schema');
    return schema;
  }

  private static names(prefix: string, schema: string) {
    const channel = wakeupChannel(prefix, schema);
    return { channel, lock: wakeupListenerLock(channel) };
  }

  /**
   * One NOTIFY: a hint, not data (the payload only names the sending store). Its transaction
   * commits without waiting for the WAL flush (`synchronous_commit` off for that transaction
   * only): a NOTIFY takes a transaction id, so with the server's default every wake-up cost a
   * disk sync of its own, as many as the producer's commits when appends are slower than the
   * coalescing window. Listeners hear it at commit either way; the commit record only says a
   * hint was sent, and a crash that loses it loses nothing the poll does not find.
   */
  async notify(): Promise<void> {
    // Nobody else listening (one process whose dispatcher heard in-process, or producers only):
    // the NOTIFY would be a transaction for no one.
    if (!(await this.othersListening())) {
      this.counts.skipped++;
      return;
    }
    const { channel } = await this.resolve();
    this.counts.sent++;
    // A pooled connection of its own: `DataSource.query` may be routed into the caller's open
    // transaction (typeorm-transactional does so), where the setting would reach their commit.
    await this.rows("SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)", [
      channel,
      this.origin,
    ]);
  }

  /**
   * One NOTIFY inside a caller's open transaction (executors that cannot report its commit):
   * PostgreSQL delivers it when that transaction commits, to every listener — this store's own
   * too (the payload is not its origin), since its dispatcher heard nothing in-process — and
   * drops it on rollback. Skipped while no connection listens, this process's included. It
   * selects a row, not pg_notify's `void`: clients that type every result column (Prisma's raw
   * queries) refuse a `void` column.
   */
  async notifyIn(connection: SqlConnection): Promise<void> {
    if (this.ownListeners.size === 0 && !(await this.othersListening())) {
      this.counts.skipped++;
      return;
    }
    const { channel } = await this.resolve();
    this.counts.sent++;
    await connection.query({
      text: 'SELECT 1 AS sent FROM pg_notify($1, $2)',
      params: [channel, 'commit'],
    });
  }

  /**
   * Whether a connection other than this store's own listeners holds the channel's listener
   * lock (one read of `pg_locks`): "no" is trusted for WAKEUP_LISTENERS_TTL_MS, "yes" for
   * WAKEUP_LISTENING_TTL_MS. A process that starts listening is signalled within the first;
   * what commits before that is found by the claims it makes on connecting and one such TTL
   * later (`listen`). If the look fails, signals are sent.
   */
  private async othersListening(): Promise<boolean> {
    const now = this.clock();
    const ttl = this.others?.listening ? WAKEUP_LISTENING_TTL_MS : WAKEUP_LISTENERS_TTL_MS;
    if (this.others && now - this.others.at < ttl) return this.others.listening;
    this.looking ??= this.lookForListeners().finally(() => (this.looking = null));
    return this.looking;
  }

  private async lookForListeners(): Promise<boolean> {
    // Dated when the look starts: a lock taken while it waits for a connection may be missed.
    const at = this.clock();
    let listening = true;
    try {
      const { lock } = await this.resolve();
      const rows = await this.rows<{ listening: boolean }>(
        `SELECT EXISTS (
  SELECT 1 FROM pg_locks
  WHERE locktype = 'advisory' AND objsubid = 2 AND classid = $1::oid AND objid = $2::oid
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND pid <> ALL($3::int[])
) AS listening`,
        [String(lock[0]), String(lock[1]), [...this.ownListeners]],
      );
      listening = rows[0]?.listening !== false;
    } catch (error) {
      this.onError(error);
    }
    this.others = { listening, at };
    return listening;
  }

  /**
   * Listens until the returned function is called: `listener` runs on each notification and
   * after each (re)connect. A dropped connection is replaced after a doubling delay.
   */
  listen(listener: () => void): () => Promise<void> {
    // An executor that knows no connection options (kyselyExecutor without its pool): nothing
    // listens, the dispatcher's poll finds what other processes commit.
    if (!this.executor.listenerConnection || this.executor.listenerConnection() === null) {
      return () => Promise.resolve();
    }
    let closed = false;
    let attempt = 0;
    let timer: NodeJS.Timeout | null = null;
    let current: PgListenClient | null = null;
    let currentPid: number | null = null;
    let settle: NodeJS.Timeout | null = null;

    const schedule = () => {
      if (closed) return;
      timer = setTimeout(() => void connect(), reconnectDelay(attempt++));
      timer.unref();
    };
    const connect = async (): Promise<void> => {
      timer = null;
      if (closed) return;
      const client = this.listenClient();
      let dropped = false;
      let pid: number | null = null;
      const drop = (error?: unknown) => {
        if (dropped) return;
        dropped = true;
        if (pid !== null && currentPid === pid) {
          this.ownListeners.delete(pid);
          currentPid = null;
        }
        if (error) this.onError(error);
        if (current === client) current = null;
        client.removeAllListeners('notification');
        client.end().catch(() => undefined);
        schedule();
      };
      client.on('error', (error) => drop(error));
      client.on('end', () => drop());
      client.on('notification', (message) => {
        if (message.channel === this.named?.channel && message.payload !== this.origin) listener();
      });
      try {
        const { channel, lock } = await this.resolve();
        await client.connect();
        await client.query(`LISTEN "${channel}"`);
        // Held while this connection lives: producers see that someone listens. Shared, so any
        // number of listeners hold it at once.
        const { rows } = await client.query(
          'SELECT pg_advisory_lock_shared($1, $2), pg_backend_pid() AS pid',
          lock,
        );
        const backend = Number(rows?.[0]?.pid);
        pid = Number.isInteger(backend) ? backend : null;
      } catch (error) {
        drop(error);
        return;
      }
      if (closed || dropped) {
        if (!dropped) await client.end().catch(() => undefined);
        return;
      }
      current = client;
      currentPid = pid;
      if (pid !== null) this.ownListeners.add(pid);
      attempt = 0;
      // Signals sent while we were not listening are gone: look for their events now. A
      // producer that looked just before the lock was taken sends nothing for up to
      // WAKEUP_LISTENERS_TTL_MS more: look once again when that has passed.
      listener();
      if (settle) clearTimeout(settle);
      settle = setTimeout(() => {
        settle = null;
        if (current === client) listener();
      }, WAKEUP_LISTENERS_TTL_MS + 100);
      settle.unref();
    };

    void connect();
    return async () => {
      closed = true;
      if (timer) clearTimeout(timer);
      if (settle) clearTimeout(settle);
      const client = current;
      current = null;
      if (currentPid !== null) this.ownListeners.delete(currentPid);
      currentPid = null;
      if (client) {
        client.removeAllListeners('end');
        client.on('end', () => undefined);
        await client.end().catch(() => undefined);
      }
    };
  }

  /** A new `pg` Client for the listener, from the executor's connection options. */
  private listenClient(): PgListenClient {
    const connection = this.executor.listenerConnection?.() ?? null;
    if (!connection) {
      throw new Error(
        `the ${this.executor.client} executor gives no connection options to listen with`,
      );
    }
    const { Client, config } = connection;
    return new Client({
      ...config,
      application_name: WAKEUP_APPLICATION_NAME,
      keepAlive: true,
    }) as PgListenClient;
  }
}
