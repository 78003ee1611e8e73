import 'reflect-metadata';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { NestFactory } from '@nestjs/core';
import { AdminKeyGuard } from './admin-key.guard';
import { AppModule, SAMPLE_DATABASE } from './app.module';

async function bootstrap(): Promise<void> {
  if (SAMPLE_DATABASE !== ':memory:') mkdirSync(dirname(SAMPLE_DATABASE), { recursive: true });
  const app = await NestFactory.create(AppModule);
  app.enableShutdownHooks();
  const port = Number(process.env.PORT ?? 3000);
  await app.listen(port, '127.0.0.1');
  console.log(
    [
      `Sample app on http://127.0.0.1:${port}`,
      `  POST /players {"name":"ada"}            create a player (+ player.created event)`,
      `  POST /players/:id/points {"points":5}    with header Idempotency-Key: <any id> (applied once)`,
      `  GET  /players, GET /outbox-stats`,
      `  GET  /outbox/stats, /outbox/dead-letters  with header x-admin-key: ${AdminKeyGuard.key}`,
    ].join('\n'),
  );
}

void bootstrap();
