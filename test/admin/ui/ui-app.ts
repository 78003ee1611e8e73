import { Injectable, Module } from '@nestjs/common';
import {
  NonRetryableError,
  OutboxAdminModule,
  OutboxEvent,
  OutboxHandler,
  OutboxStoreOptions,
} from 'nestjs-outbox';
import {
  AdminApp,
  AdminPlatform,
  ApiKeyGuard,
  ApiKeysModule,
  createAdminApp,
  seed,
} from '../admin-app';

export { API_KEY } from '../admin-app';

/** Fails with a retryable error and a long backoff: its deliveries stay "retrying". */
@Injectable()
export class Invoices {
  failing = true;
  readonly sent: string[] = [];
  @OutboxHandler('invoice.sent', {
    maxAttempts: 5,
    backoff: { initialMs: 3_600_000, maxMs: 3_600_000 },
  })
  send(event: OutboxEvent<{ n: number }>): void {
    if (this.failing) throw new Error(`smtp timeout for invoice ${event.payload.n}`);
    this.sent.push(event.id);
  }
}

/** Holds its delivery until `release()`: the delivery stays "in flight" (leased) meanwhile. */
@Injectable()
export class Reports {
  private gate: Promise<void> = Promise.resolve();
  private open: () => void = () => undefined;
  block(): void {
    this.gate = new Promise((resolve) => (this.open = resolve));
  }
  release(): void {
    this.open();
  }
  @OutboxHandler('report.built')
  async build(): Promise<void> {
    await this.gate;
  }
}

@Module({ providers: [Invoices, Reports] })
export class ConsoleHandlersModule {}

export interface DashboardApp extends AdminApp {
  /** Base URL of the listening server, e.g. `http://127.0.0.1:41234`. */
  url: string;
  invoices: Invoices;
  reports: Reports;
}

/**
 * The admin test app (built like the sample app: an API-key guard that reads `x-api-key`) with
 * the dashboard on, listening on a free port of 127.0.0.1 for the browser.
 */
export async function createDashboardApp(
  store: OutboxStoreOptions,
  platform: AdminPlatform = 'express',
): Promise<DashboardApp> {
  const t = await createAdminApp({
    store,
    platform,
    admin: OutboxAdminModule.register({
      guards: [ApiKeyGuard],
      imports: [ApiKeysModule],
      ui: true,
    }),
    imports: [ConsoleHandlersModule],
  });
  await t.app.listen(0, '127.0.0.1');
  const url = (await t.app.getUrl()).replace('[::1]', '127.0.0.1').replace('[::]', '127.0.0.1');
  return { ...t, url, invoices: t.app.get(Invoices), reports: t.app.get(Reports) };
}

/** Text no page may turn into markup; a rendered one would set `window.__pwned`. */
export const HOSTILE = {
  script: '<script>window.__pwned = 1</script>',
  img: '<img src=x onerror="window.__pwned = 2">',
  key: '<svg onload="window.__pwned = 3">',
  header: '<b>bold</b><iframe src="javascript:window.__pwned = 4"></iframe>',
};

/** Dead letters of order.placed that fail with a second fingerprint, per handler. */
export const WAREHOUSE_OUTAGES = 6;

/**
 * 132 dead letters: 55 order.placed events for two handlers (keys k0..k2) rejected ("order <n>
 * rejected by …"), 6 more whose two handlers fail with another message ("warehouse <n> offline",
 * the same handlers and type: a second fingerprint), 9 user.created, and one user.created whose
 * payload, key, header and error message carry markup. Then 3 invoice.sent deliveries retrying
 * and 2 order.placed events due in an hour (4 scheduled deliveries).
 */
export async function seedDashboard(t: DashboardApp): Promise<void> {
  await seed(t, { orders: 55, users: 9 });
  await t.outbox.append({
    type: 'user.created',
    key: HOSTILE.key,
    payload: { n: HOSTILE.script, picture: HOSTILE.img },
    headers: { note: HOSTILE.header },
  });
  t.behaviour.failing = true;
  await t.dispatcher.drain();
  const run = t.behaviour.run;
  t.behaviour.run = (handler, event) => {
    throw new NonRetryableError(`warehouse ${event.payload.n} offline (${handler})`);
  };
  try {
    await t.outbox.append(
      Array.from({ length: WAREHOUSE_OUTAGES }, (_, i) => ({
        type: 'order.placed',
        key: `w${i}`,
        payload: { n: 1000 + i },
      })),
    );
    await t.dispatcher.drain();
  } finally {
    t.behaviour.run = run;
  }
  await t.outbox.append(
    Array.from({ length: 3 }, (_, i) => ({
      type: 'invoice.sent',
      key: `inv${i}`,
      payload: { n: i },
    })),
  );
  await t.dispatcher.drain();
  const inAnHour = new Date(Date.now() + 3_600_000);
  await t.outbox.append(
    Array.from({ length: 2 }, (_, i) => ({
      type: 'order.placed',
      key: `later${i}`,
      payload: { n: 2000 + i },
      availableAt: inAnHour,
    })),
  );
}
