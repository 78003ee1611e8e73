import { AddressInfo, createServer, Server, Socket } from 'node:net';

/**
 * A TCP proxy between a client and a server, to cut the path in a test without stopping a shared
 * server. `blackhole()` stops forwarding (connections stay open, nothing answers: a partition);
 * `heal()` forwards again.
 */
export class TcpProxy {
  private readonly server: Server;
  private readonly pairs = new Set<[Socket, Socket]>();
  private holed = false;

  private constructor(
    private readonly target: { host: string; port: number },
    server: Server,
  ) {
    this.server = server;
  }

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
    for (const [client, upstream] of this.pairs) {
      client.destroy();
      upstream.destroy();
    }
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
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
