import 'reflect-metadata';
import { mkdirSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { dirname } from 'node:path';
import { NestFactory } from '@nestjs/core';
import { AdminGuard } from './admin/admin.guard';
import { AppModule, SAMPLE_DATABASE } from './app.module';

/** What the sample reads from the environment, printed in its banner. */
const ENVIRONMENT = [
  ['PORT', 'HTTP port (default 3000)'],
  ['SAMPLE_DB', 'SQLite file (default data/sample.sqlite; :memory: keeps nothing)'],
  ['SAMPLE_ADMIN_KEY', 'x-admin-key of the admin API and dashboard (default sample-admin-key)'],
  ['SAMPLE_BROKER', 'rabbitmq or nats: relay player events to a broker (default none)'],
  ['SAMPLE_BROKER_URL', "the broker's address (default the local one)"],
];

function portFromEnv(): number {
  const value = process.env.PORT ?? '3000';
  const port = Number(value);
  if (!/^\d+$/.test(value) || port > 65535) {
    console.error(`PORT=${value} is not a port number (0-65535); e.g. PORT=3001 npm start`);
    process.exit(1);
  }
  return port;
}

async function bootstrap(): Promise<void> {
  const requested = portFromEnv();
  if (SAMPLE_DATABASE !== ':memory:') mkdirSync(dirname(SAMPLE_DATABASE), { recursive: true });
  const app = await NestFactory.create(AppModule);
  app.enableShutdownHooks();
  try {
    await app.listen(requested, '127.0.0.1');
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'EADDRINUSE') throw error;
    console.error(
      `Port ${requested} on 127.0.0.1 is taken by another process. ` +
        `Start the sample on another port: PORT=${requested === 3000 ? 3001 : requested + 1} npm start`,
    );
    await app.close();
    process.exit(1);
  }
  const port = (app.getHttpServer().address() as AddressInfo).port;
  const url = `http://127.0.0.1:${port}`;
  console.log(
    [
      `Sample app on ${url}`,
      `  POST /players {"name":"ada"}            create a player (+ player.created event)`,
      `  POST /players/:id/points {"points":5}    with header Idempotency-Key: <any id> (applied once)`,
      `  GET  /players, GET /outbox-stats`,
      `  GET  /outbox/stats, /outbox/dead-letters  with header x-admin-key: ${AdminGuard.key}`,
      `Dashboard: ${url}/admin/sign-in (admin key ${AdminGuard.key}), then ${url}/outbox/ui`,
      'Environment:',
      ...ENVIRONMENT.map(([name, what]) => `  ${name.padEnd(18)} ${what}`),
    ].join('\n'),
  );
}

void bootstrap();
