/**
 * One chaos worker: a Nest application context with OutboxModule on the chosen store and one
 * handler for `ledger.entry` that writes its effect row through `@Inbox()` (the inbox transaction).
 * Started by chaos/driver.ts with ts-node; reports its counters to the driver over IPC.
 *
 * Env: CHAOS_STORE (postgres | mariadb | redis), CHAOS_PREFIX, CHAOS_LEASE_MS, CHAOS_APP_NAME.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import { DataSource } from 'typeorm';
import { OutboxHandler } from '../lib/decorators/outbox-handler.decorator';
import { Inbox, InboxContext, InboxService } from '../lib/inbox';
import { OutboxEvent } from '../lib/interfaces/outbox-event.interface';
import { OutboxDispatcher } from '../lib/dispatcher/outbox.dispatcher';
import { OutboxModule } from '../lib/outbox.module';
import {
  ChaosStore,
  chaosDataSourceOptions,
  LEDGER_HANDLER,
  LEDGER_TYPE,
  ledgerTable,
  redisUrl,
  sqlDialectOf,
  WorkerReport,
} from './common';

export interface LedgerPayload {
  seq: number;
  key: string;
}

@Injectable()
export class LedgerConsumer {
  static insertSql = '';

  constructor(private readonly inbox: InboxContext) {}

  @OutboxHandler(LEDGER_TYPE, { name: LEDGER_HANDLER, maxAttempts: 1000 })
  @Inbox()
  async apply(event: OutboxEvent<LedgerPayload>): Promise<void> {
    await this.inbox.manager.query(LedgerConsumer.insertSql, [
      event.id,
      event.payload.seq,
      event.payload.key,
      String(process.pid),
    ]);
  }
}

async function main(): Promise<void> {
  const store = (process.env.CHAOS_STORE ?? 'postgres') as ChaosStore;
  const prefix = process.env.CHAOS_PREFIX!;
  const leaseMs = Number(process.env.CHAOS_LEASE_MS ?? 2000);
  const dialect = sqlDialectOf(store);
  const dataSource = await new DataSource(
    chaosDataSourceOptions(dialect, 12, process.env.CHAOS_APP_NAME),
  ).initialize();
  const p = (i: number) => (dialect === 'postgres' ? `$${i}` : '?');
  LedgerConsumer.insertSql =
    `INSERT INTO ${ledgerTable(dialect, prefix)} (event_id, seq, k, worker) ` +
    `VALUES (${p(1)}, ${p(2)}, ${p(3)}, ${p(4)})`;

  @Module({
    imports: [
      ScheduleModule.forRoot(),
      OutboxModule.forRoot({
        store:
          store === 'redis'
            ? {
                type: 'redis',
                url: redisUrl(),
                prefix,
                redisOptions: { maxRetriesPerRequest: null },
              }
            : { type: 'typeorm', dataSource, tablePrefix: prefix, ensureSchema: false },
        dispatcher: {
          leaseMs,
          pollInterval: 200,
          batchSize: 20,
          concurrency: 10,
          handlerTimeoutMs: 30_000,
          backoff: { initialMs: 200, factor: 2, maxMs: 2_000, jitter: 0.2 },
          storeErrorBackoffMs: 200,
          storeErrorMaxBackoffMs: 2_000,
          shutdownTimeoutMs: 2_000,
        },
        retention: { cleanupIntervalMs: 0 },
        inbox: { dataSource, tablePrefix: prefix, cleanupIntervalMs: 0, lockTimeoutMs: 2_000 },
      }),
    ],
    providers: [LedgerConsumer],
  })
  class WorkerModule {}

  const app = await NestFactory.createApplicationContext(WorkerModule, { logger: false });
  await app.init();
  const dispatcher = app.get(OutboxDispatcher);
  const inbox = app.get(InboxService);
  const report = () => {
    const d = dispatcher.stats();
    const i = inbox.stats();
    const message: WorkerReport = {
      op: 'stats',
      claimed: d.claimed,
      succeeded: d.succeeded,
      failed: d.failed,
      leaseLost: d.leaseLost,
      storeErrors: d.storeErrors,
      inboxProcessed: i.processed,
      inboxDuplicates: i.duplicates,
    };
    if (process.connected) process.send!(message);
  };
  const timer = setInterval(report, 250);
  process.on('message', (message: { op: string }) => {
    if (message?.op !== 'exit') return;
    clearInterval(timer);
    report();
    void app
      .close()
      .then(() => dataSource.destroy())
      .finally(() => process.exit(0));
  });
  process.on('disconnect', () => process.exit(0));
  process.send!({ op: 'ready' });
}

if (require.main === module) {
  main().catch((error) => {
    process.stderr.write(String(error?.stack ?? error));
    process.exit(1);
  });
}
