import { OutboxAdminModule, OutboxStoreOptions } from 'nestjs-outbox';
import { AdminApp, ApiKeyGuard, ApiKeysModule, createAdminApp, seed } from '../admin-app';

export { API_KEY } from '../admin-app';

export interface DashboardApp extends AdminApp {
  /** Base URL of the listening server, e.g. `http://127.0.0.1:41234`. */
  url: string;
}

/**
 * The admin test app (built like the sample app: an API-key guard that reads `x-api-key`) with
 * the dashboard on, listening on a free port of 127.0.0.1 for the browser.
 */
export async function createDashboardApp(store: OutboxStoreOptions): Promise<DashboardApp> {
  const t = await createAdminApp({
    store,
    admin: OutboxAdminModule.register({
      guards: [ApiKeyGuard],
      imports: [ApiKeysModule],
      ui: true,
    }),
  });
  await t.app.listen(0, '127.0.0.1');
  const url = (await t.app.getUrl()).replace('[::1]', '127.0.0.1');
  return { ...t, url };
}

/** Text no page may turn into markup; a rendered one would set `window.__pwned`. */
export const HOSTILE = {
  script: '<script>window.__pwned = 1</script>',
  img: '<img src=x onerror="window.__pwned = 2">',
  key: '<svg onload="window.__pwned = 3">',
  header: '<b>bold</b><iframe src="javascript:window.__pwned = 4"></iframe>',
};

/**
 * 120 dead letters: 55 order.placed events for two handlers (keys k0..k2), 9 user.created, and one
 * user.created whose payload, key, header and error message carry markup.
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
}
