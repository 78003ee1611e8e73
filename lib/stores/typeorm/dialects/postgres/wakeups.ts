import { createHash, randomBytes } from 'node:crypto';
import type { DataSource } from 'typeorm';
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

type PgClientClass = new (config: Record<string, unknown>) => PgListenClient;

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
 * `LISTEN` on one dedicated `pg` Client per subscriber, built from the DataSource's connection
 * options — a pooled connection could be handed to a claim, or recycled by the pool.
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
  constructor(
    private readonly dataSource: DataSource,
    private readonly prefix: string,
    schema: string | null,
    private readonly onError: (error: unknown) => void,
    private readonly clock: () => number = () => performance.now(),
  ) {
    if (schema !== null) this.named = PostgresWakeups.names(prefix, schema);
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
    const runner = this.dataSource.createQueryRunner('master');
    try {
      const rows: Array<{ schema: string | null }> = await runner.query(
        'SELECT current_schema() AS schema',
      );
      const schema = rows[0]?.schema;
      if (!schema) throw new Error('current_schema() is null: the search_path names no schema');
      return schema;
    } finally {
      await runner.release();
    }
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
    // A query runner of its own: `DataSource.query` may be routed into the caller's open
    // transaction (typeorm-transactional does so), where the setting would reach their commit.
    const runner = this.dataSource.createQueryRunner('master');
    try {
      await runner.query(
        "SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)",
        [channel, this.origin],
      );
    } finally {
      await runner.release();
    }
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
    const runner = this.dataSource.createQueryRunner('master');
    try {
      const { lock } = await this.resolve();
      const rows: Array<{ listening: boolean }> = await runner.query(
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
    } finally {
      await runner.release();
    }
    this.others = { listening, at };
    return listening;
  }

  /**
   * Listens until the returned function is called: `listener` runs on each notification and
   * after each (re)connect. A dropped connection is replaced after a doubling delay.
   */
  listen(listener: () => void): () => Promise<void> {
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
      const client = new (this.clientClass())(this.clientConfig());
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

  /** The `pg` module TypeORM loaded for this DataSource. */
  private clientClass(): PgClientClass {
    const driver = this.dataSource.driver as unknown as { postgres?: { Client?: PgClientClass } };
    const Client = driver.postgres?.Client;
    if (!Client) throw new Error('the DataSource has no pg driver loaded');
    return Client;
  }

  private clientConfig(): Record<string, unknown> {
    const options = this.dataSource.options as unknown as Record<string, unknown> & {
      replication?: { master?: Record<string, unknown> };
    };
    const c = options.replication?.master ?? options;
    return {
      connectionString: c.url,
      host: c.host,
      port: c.port,
      user: c.username,
      password: c.password,
      database: c.database,
      ssl: c.ssl ?? options.ssl,
      connectionTimeoutMillis: options.connectTimeoutMS,
      application_name: WAKEUP_APPLICATION_NAME,
      keepAlive: true,
    };
  }
}
