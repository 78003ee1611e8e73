import { join } from 'node:path';
import { exitTime, forkFixture } from '../support/child-process';
import { describeWithService } from '../support/services';
import { createDialect } from '../../lib/stores/typeorm/dialects';
import { openDataSource, TestDialect } from '../stores/typeorm/typeorm-test-helpers';
import { connect, dropPrefix, uniquePrefix } from '../stores/redis/redis-test-support';

/**
 * `app.close()` closes what the outbox opened — the poll loop, wake-up subscriptions (LISTEN
 * connections, Redis subscribers), lease keeping, its own clients — so a process with a running
 * dispatcher exits as soon as the app and the app's own clients are closed, on every store.
 */
const CASES: { store: string; service: 'postgres' | 'mariadb' | 'redis' | null; apps: number }[] = [
  { store: 'sqlite', service: null, apps: 1 },
  { store: 'postgres', service: 'postgres', apps: 1 },
  { store: 'pg-sql', service: 'postgres', apps: 1 },
  { store: 'mariadb', service: 'mariadb', apps: 1 },
  { store: 'redis', service: 'redis', apps: 1 },
  { store: 'redis', service: 'redis', apps: 2 },
];

for (const { store, service, apps } of CASES) {
  const title = `process exit after app.close() (${store}, ${apps} app${apps > 1 ? 's' : ''})`;
  const body = () => {
    it('with the dispatcher running and wake-ups on, the process exits at once', async () => {
      const prefix =
        store === 'redis'
          ? uniquePrefix('exit')
          : `t_exit_${Math.random().toString(16).slice(2, 10)}_`;
      const child = forkFixture(join(__dirname, 'fixtures', 'exit-app.ts'), {
        EXIT_STORE: store,
        EXIT_PREFIX: prefix,
        EXIT_APPS: String(apps),
      });
      try {
        const { closed, handled } = await child.next<{ closed: number; handled: number }>(
          undefined,
          30_000,
        );
        expect(handled).toBe(apps);
        const gone = await exitTime(child, 10_000);
        expect(gone === null ? 'still running after 10 s' : gone - closed).toBeLessThan(1_000);
        expect(await child.exited).toEqual({ code: 0, signal: null });
      } finally {
        await child.kill();
        await dropTables(store, prefix);
      }
    }, 60_000);
  };
  if (service) describeWithService(service, title, body);
  else describe(title, body);
}

async function dropTables(store: string, prefix: string): Promise<void> {
  if (store === 'sqlite') return; // in memory
  if (store === 'redis') {
    const client = connect();
    await dropPrefix(client, prefix);
    client.disconnect();
    return;
  }
  const dialect: TestDialect = store === 'mariadb' ? 'mariadb' : 'postgres';
  const ds = await openDataSource(dialect);
  try {
    for (const ddl of createDialect(ds, { tablePrefix: prefix }).dropSchema()) await ds.query(ddl);
  } finally {
    await ds.destroy();
  }
}
