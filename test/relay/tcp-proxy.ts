import { createServer, Server, Socket } from 'node:net';

/**
 * A TCP proxy between the relay and a shared broker, so a test can cut the relay's connection
 * (an outage as the relay sees it) without stopping the broker others use.
 */
export class TcpProxy {
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private cut = false;
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {
    this.server = createServer((client) => this.accept(client));
  }

  async start(): Promise<this> {
    await new Promise<void>((done) => this.server.listen(0, '127.0.0.1', done));
    this.port = (this.server.address() as { port: number }).port;
    return this;
  }

  /** Drops every open connection and refuses new ones until `restore()`. */
  disconnect(): void {
    this.cut = true;
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
  }

  restore(): void {
    this.cut = false;
  }

  async close(): Promise<void> {
    this.disconnect();
    await new Promise<void>((done) => this.server.close(() => done()));
  }

  private accept(client: Socket): void {
    if (this.cut) {
      client.destroy();
      return;
    }
    const upstream = new Socket();
    this.sockets.add(client);
    this.sockets.add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    upstream.connect(this.targetPort, this.targetHost, () => {
      client.pipe(upstream);
      upstream.pipe(client);
    });
  }
}
