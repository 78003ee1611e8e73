import { Socket } from 'node:net';

/** Services the integration tests talk to, overridable by environment. */
export const SERVICES = {
  postgres: { host: process.env.PGHOST ?? '127.0.0.1', port: Number(process.env.PGPORT ?? 5432) },
  mariadb: {
    host: process.env.MYSQL_HOST ?? '127.0.0.1',
    port: Number(process.env.MYSQL_PORT ?? 3306),
  },
  redis: {
    host: process.env.REDIS_HOST ?? '127.0.0.1',
    port: Number(process.env.REDIS_PORT ?? 6379),
  },
  nats: { host: '127.0.0.1', port: 4222 },
  mqtt: { host: '127.0.0.1', port: 1883 },
  rabbitmq: {
    host: process.env.RABBITMQ_HOST ?? '127.0.0.1',
    port: Number(process.env.RABBITMQ_PORT ?? 5672),
  },
} as const;

export type ServiceName = keyof typeof SERVICES;

function reachable(host: string, port: number, timeoutMs = 1500): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs);
    socket.once('connect', () => done(true));
    socket.once('timeout', () => done(false));
    socket.once('error', () => done(false));
    socket.connect(port, host);
  });
}

/** Probes every service once before the tests (jest globalSetup). */
export async function probeServices(): Promise<void> {
  const missing: string[] = [];
  for (const [name, { host, port }] of Object.entries(SERVICES)) {
    if (!(await reachable(host, port))) missing.push(`${name} (${host}:${port})`);
  }
  if (missing.length === 0) return;
  if (process.env.CI === 'true') {
    throw new Error(
      `Services missing under CI=true: ${missing.join(', ')}. .ci/run should have started them.`,
    );
  }
  process.env.OUTBOX_TEST_MISSING = missing.map((m) => m.split(' ')[0]).join(',');
  console.warn(
    `\n!!! SKIPPING tests that need: ${missing.join(', ')}. Start them to run those tests. !!!\n`,
  );
}

export function serviceUp(name: ServiceName): boolean {
  return !(process.env.OUTBOX_TEST_MISSING ?? '').split(',').includes(name);
}

/** `describe` that runs only when the service answered the probe (always under CI=true). */
export function describeWithService(name: ServiceName, title: string, body: () => void): void {
  const run = serviceUp(name) ? describe : describe.skip;
  run(`${title} [${name}]`, body);
}
