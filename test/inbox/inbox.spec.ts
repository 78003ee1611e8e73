import { Inject, Injectable } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import {
  NonRetryableError,
  OutboxEvent,
  OutboxHandler,
  OutboxHandlerContext,
  OutboxOptionsError,
} from 'nestjs-outbox';
import { SchedulerRegistry } from '@nestjs/schedule';
import {
  createInboxMigration,
  INBOX_CLEANUP_INTERVAL,
  Inbox,
  InboxContext,
  InboxManager,
  InboxMessageIdError,
  InboxService,
} from 'nestjs-outbox';
import { createOutboxApp, TestApp } from '../support/outbox-app';
import { describeWithService } from '../support/services';
import {
  createEffectTable,
  inboxTable,
  InboxTestDialect,
  openInboxDataSource,
  uniquePrefix,
} from './inbox-test-helpers';
import { OutboxHandlerRegistry } from '../../lib/outbox-handler.registry';
import { resolveOutboxOptions } from '../../lib/outbox-options';

const EFFECTS = Symbol('EFFECTS');
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Records each application of a payment as one row, in the inbox transaction. */
@Injectable()
class PaymentsConsumer {
  calls = 0;
  failNext = 0;
  holdMs = 0;

  constructor(
    private readonly inbox: InboxContext,
    @Inject(EFFECTS) private readonly effects: { insertSql: string },
  ) {}

  @OutboxHandler('payment.captured')
  @Inbox()
  async apply(event: OutboxEvent<{ amount: number }>): Promise<string> {
    this.calls++;
    await this.inbox.manager.query(this.effects.insertSql, [event.id, 'applied']);
    // Widens the window in which concurrent duplicates meet the uncommitted claim.
    if (this.holdMs) await sleep(this.holdMs);
    if (this.failNext > 0) {
      this.failNext--;
      throw new Error('failed after writing its effect');
    }
    return 'applied';
  }
}

function event(id: string = randomUUID()): OutboxEvent<{ amount: number }> {
  const now = new Date();
  return {
    id,
    type: 'payment.captured',
    payload: { amount: 10 },
    key: null,
    headers: {},
    occurredAt: now,
    availableAt: now,
  };
}

function handlerContext(handler: string): OutboxHandlerContext {
  return {
    attempt: 1,
    signal: new AbortController().signal,
    workerId: 'test',
    deliveryId: randomUUID(),
    handler,
  };
}

function inboxSemantics(dialect: InboxTestDialect): void {
  let dataSource: DataSource;
  let prefix: string;
  let effects: Awaited<ReturnType<typeof createEffectTable>>;
  let inbox: ReturnType<typeof inboxTable>;
  let t: TestApp;
  let consumer: PaymentsConsumer;
  const deliver = (e: OutboxEvent) =>
    t
      .get(OutboxHandlerRegistry)
      .get('PaymentsConsumer.apply')!
      .invoke(e, handlerContext('PaymentsConsumer.apply'));

  beforeAll(async () => {
    dataSource = await openInboxDataSource(dialect);
    prefix = uniquePrefix(dialect.slice(0, 2));
    effects = await createEffectTable(dataSource, `${prefix}effects`);
    inbox = inboxTable(dataSource, prefix);
  });

  afterAll(async () => {
    await effects?.drop();
    await inbox?.drop();
    await dataSource?.destroy();
  });

  beforeEach(async () => {
    t = await createOutboxApp([PaymentsConsumer, { provide: EFFECTS, useValue: effects }], {
      dispatcher: { enabled: false },
      module: {
        inbox: { dataSource, tablePrefix: prefix, cleanupIntervalMs: 0, cleanupBatchSize: 10 },
      },
    });
    consumer = t.get(PaymentsConsumer);
  });

  afterEach(() => t.app.close());

  it('applies a duplicate delivery once and returns undefined for the duplicate', async () => {
    const e = event();
    await expect(deliver(e)).resolves.toBe('applied');
    await expect(deliver(e)).resolves.toBeUndefined();
    expect(consumer.calls).toBe(1);
    expect(await effects.count(e.id)).toBe(1);
    expect(await inbox.count('PaymentsConsumer.apply', e.id)).toBe(1);
    expect(t.get(InboxService).stats()).toMatchObject({ processed: 1, duplicates: 1, failed: 0 });
  });

  it('rolls back effect and claim when the handler throws; the redelivery applies it once', async () => {
    const e = event();
    consumer.failNext = 1;
    await expect(deliver(e)).rejects.toThrow('failed after writing its effect');
    expect(await effects.count(e.id)).toBe(0);
    expect(await inbox.count('PaymentsConsumer.apply', e.id)).toBe(0);

    await expect(deliver(e)).resolves.toBe('applied');
    await expect(deliver(e)).resolves.toBeUndefined();
    expect(consumer.calls).toBe(2);
    expect(await effects.count(e.id)).toBe(1);
    expect(t.get(InboxService).stats()).toMatchObject({ processed: 1, duplicates: 1, failed: 1 });
  });

  it('records the delivery made by the dispatcher, so a later redelivery is skipped', async () => {
    const [stored] = await t.outbox.append([{ type: 'payment.captured', payload: { amount: 5 } }]);
    await t.dispatcher.drain();
    expect(await effects.count(stored.id)).toBe(1);
    await expect(deliver(event(stored.id))).resolves.toBeUndefined();
    expect(await effects.count(stored.id)).toBe(1);
  });

  it('20 concurrent deliveries of one message apply it exactly once', async () => {
    const e = event();
    consumer.holdMs = 100;
    const results = await Promise.allSettled(Array.from({ length: 20 }, () => deliver(e)));
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
    expect(results.filter((r) => r.status === 'fulfilled' && r.value === 'applied')).toHaveLength(
      1,
    );
    expect(consumer.calls).toBe(1);
    expect(await effects.count(e.id)).toBe(1);
    expect(await inbox.count('PaymentsConsumer.apply', e.id)).toBe(1);
  });

  it('when the first of 20 concurrent claimers rolls back, exactly one of the others applies it', async () => {
    const e = event();
    consumer.holdMs = 100;
    consumer.failNext = 1;
    const results = await Promise.allSettled(Array.from({ length: 20 }, () => deliver(e)));
    const applied = results.filter((r) => r.status === 'fulfilled' && r.value === 'applied');
    const failed = results.filter((r) => r.status === 'rejected') as PromiseRejectedResult[];
    expect(applied).toHaveLength(1);
    expect(failed.map((r) => (r.reason as Error).message)).toEqual([
      'failed after writing its effect',
    ]);
    expect(await effects.count(e.id)).toBe(1);
  });

  it('retention deletes records older than inbox.retentionMs in bounded batches', async () => {
    const consumerName = `retention-${randomUUID()}`;
    const old = Array.from({ length: 25 }, (_, i) => `old-${i}`);
    const fresh = Array.from({ length: 5 }, (_, i) => `fresh-${i}`);
    await insertInboxRows(dataSource, inbox.table, consumerName, old, 8);
    await insertInboxRows(dataSource, inbox.table, consumerName, fresh, 0);

    const [result] = await t.get(InboxService).cleanup();
    expect(result).toEqual({ deleted: 25, batches: 3, skipped: false });
    const rows: { message_id: string }[] = await dataSource.query(
      `SELECT message_id FROM ${inbox.table} WHERE consumer = ${dialect === 'postgres' ? '$1' : '?'}`,
      [consumerName],
    );
    expect(rows.map((r) => r.message_id).sort()).toEqual(fresh);
    expect(t.get(InboxService).stats().cleanupDeleted).toBe(25);
  });

  if (dialect !== 'sqlite') {
    it('retention runs one at a time: a held cleanup lock makes another runner skip', async () => {
      const consumerName = `locked-${randomUUID()}`;
      await insertInboxRows(dataSource, inbox.table, consumerName, ['a', 'b'], 8);
      const holder = dataSource.createQueryRunner();
      const name = `nestjs-outbox:inbox-cleanup:${prefix}inbox`;
      await holder.query(
        dialect === 'postgres'
          ? 'SELECT pg_advisory_lock(hashtext($1))'
          : // MySQL lock names are qualified with the database (see the inbox's mysql dialect).
            "SELECT GET_LOCK(CONCAT(DATABASE(), '.', ?), 5)",
        [name],
      );
      try {
        const [result] = await t.get(InboxService).cleanup();
        expect(result).toEqual({ deleted: 0, batches: 0, skipped: true });
        expect(await inbox.count(consumerName, 'a')).toBe(1);
      } finally {
        await holder.query(
          dialect === 'postgres'
            ? 'SELECT pg_advisory_unlock(hashtext($1))'
            : "SELECT RELEASE_LOCK(CONCAT(DATABASE(), '.', ?))",
          [name],
        );
        await holder.release();
      }
      const [after] = await t.get(InboxService).cleanup();
      expect(after.skipped).toBe(false);
      expect(await inbox.count(consumerName, 'a')).toBe(0);
    });
  }
}

async function insertInboxRows(
  dataSource: DataSource,
  table: string,
  consumer: string,
  ids: string[],
  daysAgo: number,
): Promise<void> {
  const type = dataSource.options.type;
  for (const id of ids) {
    if (type === 'postgres') {
      await dataSource.query(
        `INSERT INTO ${table} (consumer, message_id, processed_at) VALUES ($1, $2, now() - $3 * interval '1 day')`,
        [consumer, id, daysAgo],
      );
    } else if (type === 'mariadb') {
      await dataSource.query(
        `INSERT INTO ${table} (consumer, message_id, processed_at) VALUES (?, ?, UTC_TIMESTAMP(3) - INTERVAL ? DAY)`,
        [consumer, id, daysAgo],
      );
    } else {
      await dataSource.query(
        `INSERT INTO ${table} (consumer, message_id, processed_at) VALUES (?, ?, ?)`,
        [consumer, id, Date.now() - daysAgo * 86_400_000],
      );
    }
  }
}

describe('@Inbox() on outbox handlers [sqlite]', () => inboxSemantics('sqlite'));
describeWithService('postgres', '@Inbox() on outbox handlers', () => inboxSemantics('postgres'));
describeWithService('mariadb', '@Inbox() on outbox handlers', () => inboxSemantics('mariadb'));

describeWithService('postgres', '@Inbox() under REPEATABLE READ', () => {
  it('20 concurrent deliveries still apply once (serialization failures of the claim are retried)', async () => {
    const dataSource = await openInboxDataSource('postgres');
    const prefix = uniquePrefix('rr');
    const effects = await createEffectTable(dataSource, `${prefix}effects`);
    const t = await createOutboxApp([PaymentsConsumer, { provide: EFFECTS, useValue: effects }], {
      dispatcher: { enabled: false },
      module: {
        inbox: {
          dataSource,
          tablePrefix: prefix,
          isolationLevel: 'REPEATABLE READ',
          cleanupIntervalMs: 0,
        },
      },
    });
    try {
      t.get(PaymentsConsumer).holdMs = 100;
      const e = event();
      const invoke = t.get(OutboxHandlerRegistry).get('PaymentsConsumer.apply')!.invoke;
      const results = await Promise.allSettled(
        Array.from({ length: 20 }, () => invoke(e, handlerContext('PaymentsConsumer.apply'))),
      );
      expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
      expect(await effects.count(e.id)).toBe(1);
      expect(t.get(InboxService).stats().transientRetries).toBeGreaterThan(0);
    } finally {
      await t.app.close();
      await effects.drop();
      await inboxTable(dataSource, prefix).drop();
      await dataSource.destroy();
    }
  });
});

describe('@Inbox() configuration and message ids [sqlite]', () => {
  let dataSource: DataSource;

  beforeAll(async () => {
    dataSource = await openInboxDataSource('sqlite');
  });
  afterAll(() => dataSource.destroy());

  @Injectable()
  class ByPayloadPath {
    @OutboxHandler('order.placed')
    @Inbox({ messageId: { path: 'orderRef' }, consumer: 'orders-projection' })
    async apply(_event: OutboxEvent): Promise<string> {
      return 'ok';
    }
  }

  it('takes the id from a payload path and records under the given consumer name', async () => {
    const t = await createOutboxApp([ByPayloadPath], {
      dispatcher: { enabled: false },
      module: { inbox: { dataSource, cleanupIntervalMs: 0 } },
    });
    try {
      const invoke = t.get(OutboxHandlerRegistry).get('ByPayloadPath.apply')!.invoke;
      const e = { ...event(), type: 'order.placed', payload: { orderRef: 'R-1' } };
      await expect(invoke(e, handlerContext('ByPayloadPath.apply'))).resolves.toBe('ok');
      // Another event id with the same business reference is the same message to this consumer.
      await expect(
        invoke({ ...e, id: randomUUID() }, handlerContext('ByPayloadPath.apply')),
      ).resolves.toBeUndefined();
      expect(await inboxTable(dataSource, 'outbox_').count('orders-projection', 'R-1')).toBe(1);

      const missing = invoke({ ...e, payload: {} }, handlerContext('ByPayloadPath.apply'));
      await expect(missing).rejects.toBeInstanceOf(InboxMessageIdError);
      // Retrying cannot conjure an id: the dispatcher dead-letters it at once.
      await expect(missing).rejects.toBeInstanceOf(NonRetryableError);
    } finally {
      await t.app.close();
    }
  });

  @Injectable()
  class ManagerParamOnOutboxHandler {
    @OutboxHandler('x.y')
    @Inbox()
    async apply(
      _event: OutboxEvent,
      _context: OutboxHandlerContext,
      @InboxManager() _m?: unknown,
    ) {}
  }

  it('refuses @InboxManager() on an outbox handler at bootstrap, naming the alternative', async () => {
    await expect(
      createOutboxApp([ManagerParamOnOutboxHandler], {
        dispatcher: { enabled: false },
        module: { inbox: { dataSource } },
      }),
    ).rejects.toThrow(/InboxContext/);
  });

  @Injectable()
  class NoInboxConfigured {
    @OutboxHandler('x.z')
    @Inbox()
    async apply(): Promise<void> {}
  }

  it('refuses @Inbox() at bootstrap when no DataSource is configured', async () => {
    await expect(
      createOutboxApp([NoInboxConfigured], { dispatcher: { enabled: false } }),
    ).rejects.toThrow(/NoInboxConfigured\.apply has no DataSource/);
  });

  it('validates the inbox options with the field named', () => {
    const base = { store: { type: 'memory' as const } };
    expect(() => resolveOutboxOptions({ ...base, inbox: {} })).toThrow(OutboxOptionsError);
    expect(() => resolveOutboxOptions({ ...base, inbox: {} })).toThrow(/inbox\.dataSource/);
    expect(() =>
      resolveOutboxOptions({ ...base, inbox: { dataSource, isolationLevel: 'SNAPSHOT' as never } }),
    ).toThrow(/inbox\.isolationLevel/);
    expect(() =>
      resolveOutboxOptions({ ...base, inbox: { dataSource, tablePrefix: 'x-y' } }),
    ).toThrow(/inbox\.tablePrefix/);
    expect(resolveOutboxOptions(base).inbox).toBeNull();
    expect(resolveOutboxOptions({ ...base, inbox: { dataSource } }).inbox).toMatchObject({
      retentionMs: 7 * 86_400_000,
      tablePrefix: 'outbox_',
      cleanupBatchSize: 1000,
    });
    expect(
      resolveOutboxOptions({ store: { type: 'typeorm', dataSource, tablePrefix: 'app_' } }).inbox,
    ).toMatchObject({
      dataSource,
      tablePrefix: 'app_',
    });
  });

  @Injectable()
  class OnItsOwnDataSource {
    @OutboxHandler('report.requested')
    @Inbox({ dataSource: 'REPORTING_DS', consumer: 'reports' })
    async apply(): Promise<string> {
      return 'ran';
    }
  }

  it('runs a consumer on the DataSource named by its decorator, without a module-level inbox', async () => {
    const t = await createOutboxApp(
      [OnItsOwnDataSource, { provide: 'REPORTING_DS', useValue: dataSource }],
      { dispatcher: { enabled: false } },
    );
    try {
      const invoke = t.get(OutboxHandlerRegistry).get('OnItsOwnDataSource.apply')!.invoke;
      const e = { ...event(), type: 'report.requested' };
      await expect(invoke(e, handlerContext('OnItsOwnDataSource.apply'))).resolves.toBe('ran');
      await expect(invoke(e, handlerContext('OnItsOwnDataSource.apply'))).resolves.toBeUndefined();
      expect(await inboxTable(dataSource, 'outbox_').count('reports', e.id)).toBe(1);
    } finally {
      await t.app.close();
    }
  });

  it('registers the retention job in SchedulerRegistry and removes it on shutdown', async () => {
    const t = await createOutboxApp(
      [PaymentsConsumer, { provide: EFFECTS, useValue: { insertSql: '' } }],
      {
        dispatcher: { enabled: false },
        module: { inbox: { dataSource, cleanupIntervalMs: 60_000 } },
      },
    );
    const registry = t.get(SchedulerRegistry);
    expect(registry.doesExist('interval', INBOX_CLEANUP_INTERVAL)).toBe(true);
    await t.app.close();
    expect(registry.doesExist('interval', INBOX_CLEANUP_INTERVAL)).toBe(false);
  });

  it('ships a TypeORM migration creating and dropping the inbox table', async () => {
    const Migration = createInboxMigration({ tablePrefix: 'mig_' });
    const migrated = await new DataSource({
      type: 'better-sqlite3',
      database: ':memory:',
      migrations: [Migration],
    }).initialize();
    try {
      await migrated.runMigrations();
      expect(await migrated.createQueryRunner().hasTable('mig_inbox')).toBe(true);
      await migrated.undoLastMigration();
      expect(await migrated.createQueryRunner().hasTable('mig_inbox')).toBe(false);
    } finally {
      await migrated.destroy();
    }
  });
});
