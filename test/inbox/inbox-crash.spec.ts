import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { DataSource } from 'typeorm';
import { ensureInboxSchema, InboxService } from 'nestjs-outbox';
import { forkFixture } from '../support/child-process';
import { createOutboxApp } from '../support/outbox-app';
import { describeWithService } from '../support/services';
import { CRASH_EFFECTS, CrashConsumer, deliverTo } from './fixtures/crash-consumer';
import {
  createEffectTable,
  inboxTable,
  InboxTestDialect,
  openInboxDataSource,
  uniquePrefix,
} from './inbox-test-helpers';
import { OutboxHandlerRegistry } from '../../lib/outbox-handler.registry';

/** Runs the fixture in a child process until it has written its effect, then SIGKILLs it. */
async function crashMidHandler(
  env: Record<string, string>,
): Promise<{ signal: NodeJS.Signals | null }> {
  const child = forkFixture(join(__dirname, 'fixtures', 'crash-consumer.ts'), env);
  try {
    const message = await child.next(() => true, 30_000);
    if (message !== 'effect-written') throw new Error(`child said ${String(message)}`);
  } finally {
    await child.kill();
  }
  return { signal: (await child.exited).signal };
}

function crashWindow(dialect: Exclude<InboxTestDialect, 'sqlite'>): void {
  let dataSource: DataSource;
  let prefix: string;
  let effects: Awaited<ReturnType<typeof createEffectTable>>;

  beforeAll(async () => {
    dataSource = await openInboxDataSource(dialect);
    prefix = uniquePrefix(`cr${dialect.slice(0, 2)}`);
    effects = await createEffectTable(dataSource, `${prefix}effects`);
    await ensureInboxSchema(dataSource, { tablePrefix: prefix });
  });

  afterAll(async () => {
    await effects?.drop();
    await inboxTable(dataSource, prefix).drop();
    await dataSource?.destroy();
  });

  it('a consumer killed after writing its effect commits nothing; the redelivery applies it exactly once', async () => {
    const messageId = randomUUID();
    const { signal } = await crashMidHandler({
      CRASH_DIALECT: dialect,
      CRASH_PREFIX: prefix,
      CRASH_MESSAGE_ID: messageId,
      CRASH_INSERT_SQL: effects.insertSql,
    });
    expect(signal).toBe('SIGKILL');
    expect(await effects.count(messageId)).toBe(0);
    expect(await inboxTable(dataSource, prefix).count('CrashConsumer.apply', messageId)).toBe(0);

    const t = await createOutboxApp(
      [CrashConsumer, { provide: CRASH_EFFECTS, useValue: effects }],
      {
        dispatcher: { enabled: false },
        module: { inbox: { dataSource, tablePrefix: prefix, cleanupIntervalMs: 0 } },
      },
    );
    try {
      const registry = t.get(OutboxHandlerRegistry);
      await expect(deliverTo(registry, messageId)).resolves.toBe('applied');
      await expect(deliverTo(registry, messageId)).resolves.toBeUndefined();
      expect(await effects.count(messageId)).toBe(1);
      expect(t.get(InboxService).stats()).toMatchObject({ processed: 1, duplicates: 1 });
    } finally {
      await t.app.close();
    }
  });
}

describeWithService('postgres', 'inbox crash window', () => crashWindow('postgres'));
describeWithService('mariadb', 'inbox crash window', () => crashWindow('mariadb'));
