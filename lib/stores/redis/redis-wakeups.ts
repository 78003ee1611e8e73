import { randomBytes } from 'node:crypto';
import { quitConnection, type RedisClientLike } from './redis-client';

/** The part of an ioredis client (`Redis` or `Cluster`) pub/sub uses. */
interface RedisPubSubClient {
  publish(channel: string, message: string): Promise<unknown>;
  subscribe(channel: string): Promise<unknown>;
  duplicate(...args: unknown[]): RedisPubSubClient;
  on(event: 'message', listener: (channel: string, message: string) => void): unknown;
  on(event: 'ready', listener: () => void): unknown;
  on(event: 'error', listener: (error: unknown) => void): unknown;
  once(event: 'ready' | 'end', listener: () => void): unknown;
  quit(): Promise<unknown>;
  disconnect(): void;
  readonly status?: string;
}

/** Client name of a store's subscriber connection, so it can be found in `CLIENT LIST`. */
export function wakeupConnectionName(prefix: string): string {
  return `nestjs-outbox-wakeups:${prefix.replace(/[^\w.:-]/g, '_')}`;
}

/**
 * Redis wake-ups: `PUBLISH` after an append's script returned, and `SUBSCRIBE` on a
 * duplicate of the store's client (a subscribed connection can run nothing else). ioredis
 * reconnects the duplicate with its own retry strategy; every `ready` re-subscribes and tells the
 * listener, since signals published while it was away are gone.
 */
export class RedisWakeups {
  /**
   * Sent as the message so this store's own subscriber can skip its own signals (its dispatcher
   * heard of those appends in-process already). Not trusted for anything else.
   */
  private readonly origin = randomBytes(6).toString('hex');

  constructor(
    private readonly client: RedisClientLike,
    /** Under the store's `{prefix}` hash tag, so it maps to the outbox's slot. */
    readonly channel: string,
    /** Client name of the subscriber connection (see `wakeupConnectionName`). */
    private readonly connectionName: string,
    readonly reportError: (error: unknown) => void,
  ) {}

  async notify(): Promise<void> {
    await (this.client as unknown as RedisPubSubClient).publish(this.channel, this.origin);
  }

  listen(listener: () => void): () => Promise<void> {
    const base = this.client as unknown as RedisPubSubClient & { isCluster?: boolean };
    const subscriber = base.isCluster
      ? base.duplicate()
      : base.duplicate({ connectionName: this.connectionName });
    let closed = false;
    subscriber.on('error', (error) => {
      if (!closed) this.reportError(error);
    });
    subscriber.on('message', (channel, message) => {
      if (channel === this.channel && message !== this.origin && !closed) listener();
    });
    subscriber.on('ready', () => {
      subscriber.subscribe(this.channel).then(
        () => {
          if (!closed) listener();
        },
        (error: unknown) => {
          if (!closed) this.reportError(error);
        },
      );
    });
    // Stopped once, whoever asks again (the dispatcher stopping after the store closed its
    // subscriptions): a second QUIT would fail on the closing connection, and the disconnect
    // after it would leave ioredis' disconnect timer (2 s) keeping the process alive.
    // A subscriber still connecting is let finish first: a QUIT that closes the socket under
    // ioredis' ready check fails the check, whose recovery disconnects the closed connection
    // again, with the same timer.
    let stopped: Promise<void> | null = null;
    return () => {
      closed = true;
      stopped ??= connected(subscriber).then(() => quitConnection(subscriber));
      return stopped;
    };
  }
}

/**
 * Settles once a subscriber that is connecting (its ready check perhaps in flight) is ready or
 * gone, at once in any other state, and within 1 s whatever happens.
 */
function connected(subscriber: RedisPubSubClient): Promise<void> {
  const { status } = subscriber;
  if (status !== 'connecting' && status !== 'connect') return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, 1_000);
    const done = () => {
      clearTimeout(timer);
      resolve();
    };
    subscriber.once('ready', done);
    subscriber.once('end', done);
  });
}
