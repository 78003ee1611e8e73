import { AddressInfo, createServer, Server, Socket } from 'node:net';

/**
 * A TCP proxy between a client and a shared server (database, broker), so a test can break the
 * path without stopping the server others use:
 * - `disconnect()` drops every open connection and refuses new ones (an outage as the client sees
 *   it) until `restore()`;
 * - `blackhole()` stops forwarding but keeps connections open, so nothing answers (a partition)
 *   until `heal()`.
 */
export class TcpProxy {
  private readonly pairs = new Set<[Socket, Socket]>();
  private refusing = false;
  private holed = false;

  private constructor(
    private readonly target: { host: string; port: number },
    private readonly server: Server,
  ) {}

  static async start(target: { host: string; port: number }): Promise<TcpProxy> {
    const server = createServer();
    const proxy = new TcpProxy(target, server);
    server.on('connection', (client) => proxy.accept(client));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return proxy;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  disconnect(): void {
    this.refusing = true;
    for (const [client, upstream] of this.pairs) {
      client.destroy();
      upstream.destroy();
    }
    this.pairs.clear();
  }

  restore(): void {
    this.refusing = false;
  }

  blackhole(): void {
    this.holed = true;
    for (const [client, upstream] of this.pairs) {
      client.unpipe(upstream);
      upstream.unpipe(client);
      client.pause();
      upstream.pause();
    }
  }

  heal(): void {
    this.holed = false;
    for (const pair of this.pairs) this.pipe(pair);
  }

  async close(): Promise<void> {
    this.disconnect();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    if (this.refusing) {
      client.destroy();
      return;
    }
    const upstream = new Socket();
    const pair: [Socket, Socket] = [client, upstream];
    this.pairs.add(pair);
    const drop = () => {
      this.pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pause();
    upstream.connect(this.target.port, this.target.host, () => {
      if (!this.holed) this.pipe(pair);
    });
  }

  private pipe([client, upstream]: [Socket, Socket]): void {
    client.pipe(upstream);
    upstream.pipe(client);
    client.resume();
    upstream.resume();
  }
}
