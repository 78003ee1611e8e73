import { createHash, randomBytes } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { reconnectDelay } from '../../../wakeups';

/** The part of a `pg` Client the wake-up listener uses. */
interface PgListenClient {
  connect(): Promise<unknown>;
  query(text: string): Promise<unknown>;
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
 * The NOTIFY channel of one outbox (schema + table prefix): a lowercase identifier of at most 63
 * characters, readable, with a hash of both so distinct outboxes never share a channel.
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

  constructor(
    private readonly dataSource: DataSource,
    readonly channel: string,
    private readonly onError: (error: unknown) => void,
  ) {}

  /**
   * One NOTIFY: a hint, not data (the payload only names the sending store). Its transaction
   * commits without waiting for the WAL flush (`synchronous_commit` off for that transaction
   * only): a NOTIFY takes a transaction id, so with the server's default every wake-up cost a
   * disk sync of its own, as many as the producer's commits when appends are slower than the
   * coalescing window. Listeners hear it at commit either way; the commit record only says a
   * hint was sent, and a crash that loses it loses nothing the poll does not find.
   */
  async notify(): Promise<void> {
    // A query runner of its own: `DataSource.query` may be routed into the caller's open
    // transaction (typeorm-transactional does so), where the setting would reach their commit.
    const runner = this.dataSource.createQueryRunner('master');
    try {
      await runner.query(
        "SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)",
        [this.channel, this.origin],
      );
    } finally {
      await runner.release();
    }
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
      const drop = (error?: unknown) => {
        if (dropped) return;
        dropped = true;
        if (error) this.onError(error);
        if (current === client) current = null;
        client.removeAllListeners('notification');
        client.end().catch(() => undefined);
        schedule();
      };
      client.on('error', (error) => drop(error));
      client.on('end', () => drop());
      client.on('notification', (message) => {
        if (message.channel === this.channel && message.payload !== this.origin) listener();
      });
      try {
        await client.connect();
        await client.query(`LISTEN "${this.channel}"`);
      } catch (error) {
        drop(error);
        return;
      }
      if (closed || dropped) {
        if (!dropped) await client.end().catch(() => undefined);
        return;
      }
      current = client;
      attempt = 0;
      // Signals sent while we were not listening are gone: look for their events now.
      listener();
    };

    void connect();
    return async () => {
      closed = true;
      if (timer) clearTimeout(timer);
      const client = current;
      current = null;
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
