import type { Browser, BrowserContext, Page } from 'playwright-core';
import { OutboxStoreOptions } from 'nestjs-outbox';
import { describeWithBrowser, launchChromium, screenshot } from './browser';
import { API_KEY, createDashboardApp, DashboardApp, HOSTILE, seedDashboard } from './ui-app';

/**
 * The dashboard in headless Chromium against a real store: one browser per file, one page reused
 * through the steps, which build on each other (120 dead letters, then replays and purges).
 */
export function describeDashboard(
  title: string,
  store: () => Promise<OutboxStoreOptions>,
  cleanup: () => Promise<void> = async () => undefined,
): void {
  describeWithBrowser(`Dashboard ${title}`, () => {
    let t: DashboardApp;
    let browser: Browser;
    let context: BrowserContext;
    let page: Page;
    const consoleProblems: string[] = [];
    const slug = title.replace(/\W+/g, '-').replace(/^-|-$/g, '');
    const shot = (name: string) => screenshot(page, `${slug}-${name}`);

    beforeAll(async () => {
      t = await createDashboardApp(await store());
      await seedDashboard(t);
      browser = await launchChromium();
      // The guard's header on every request, as a reverse proxy in front of the app would add it.
      context = await browser.newContext({
        extraHTTPHeaders: { 'x-api-key': API_KEY },
        timezoneId: 'UTC',
        viewport: { width: 1280, height: 900 },
      });
      context.setDefaultTimeout(10_000);
      page = await context.newPage();
      page.on('console', (message) => {
        if (message.type() === 'error' || message.type() === 'warning') {
          consoleProblems.push(message.text());
        }
      });
      page.on('pageerror', (error) => consoleProblems.push(String(error)));
    }, 60_000);

    afterAll(async () => {
      await browser?.close();
      await t?.close();
      await cleanup();
    });

    const dashboard = () => `${t.url}/outbox/ui`;
    const rows = () => page.locator('#dead-letters tbody tr');
    const rowIds = () =>
      rows().evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-id') as string));
    const alertText = () => page.locator('#alert').innerText();
    // The page's globals, read in the browser (this file compiles without the DOM lib).
    const pwned = () => page.evaluate('window.__pwned');

    /** Runs `step` and waits until the page has finished the action it started. */
    async function settle(step: () => Promise<unknown>): Promise<void> {
      const before = (await page.locator('body').getAttribute('data-settled')) ?? '';
      await step();
      await page.locator(`body[data-settled]:not([data-settled="${before}"])`).waitFor();
    }

    async function listAfterFilter(fill: Record<string, string>): Promise<void> {
      if (!(await page.locator('#view-list').isVisible())) {
        await settle(() => page.locator('[data-nav=list]').click());
      }
      for (const name of ['type', 'handler', 'key', 'failedBefore']) {
        await page.locator(`#filter [name=${name}]`).fill(fill[name] ?? '');
      }
      await settle(() => page.locator('#filter button[type=submit]').click());
    }

    async function confirm(expectMatchAll = false): Promise<string> {
      const dialog = page.locator('#confirm');
      await dialog.waitFor({ state: 'visible' });
      const text = await dialog.innerText();
      if (expectMatchAll) {
        // Match-all needs the extra confirmation before the button works.
        expect(await page.locator('#confirm-ok').isDisabled()).toBe(true);
        await page.locator('#confirm-all').check();
      }
      await settle(() => page.locator('#confirm-ok').click());
      await dialog.waitFor({ state: 'hidden' });
      return text;
    }

    it('refuses the page and its files without the guard credentials', async () => {
      const stranger = await browser.newContext();
      try {
        const refused = await stranger.newPage();
        const response = await refused.goto(dashboard());
        expect(response?.status()).toBe(403);
        expect(response?.headers()['cache-control']).toBe('no-store');
        expect(await refused.locator('#view-stats').count()).toBe(0);
        for (const file of ['dashboard.js', 'dashboard.css']) {
          const asset = await stranger.request.get(`${dashboard()}/${file}`);
          expect(asset.status()).toBe(403);
        }
        const wrongKey = await stranger.request.get(dashboard(), {
          headers: { 'x-api-key': 'not-the-key' },
        });
        expect(wrongKey.status()).toBe(403);
        await screenshot(refused, `${slug}-refused`);
      } finally {
        await stranger.close();
      }
    });

    it('serves the page with a strict CSP and no-store', async () => {
      const response = await page.goto(dashboard());
      expect(response?.status()).toBe(200);
      const headers = response!.headers();
      expect(headers['cache-control']).toBe('no-store');
      expect(headers['content-type']).toBe('text/html; charset=utf-8');
      const csp = headers['content-security-policy'];
      expect(csp).toContain("script-src 'self'");
      expect(csp).toContain("style-src 'self'");
      expect(csp).toContain("default-src 'none'");
      expect(csp).not.toContain('unsafe-inline');
      expect(csp).not.toContain('unsafe-eval');
      expect(headers['x-content-type-options']).toBe('nosniff');
    });

    it('shows the stats and a chart of the dead letters by fingerprint', async () => {
      await page.goto(`${dashboard()}#/stats`);
      await page.locator('#stat-dead').filter({ hasText: '120' }).waitFor();
      expect(await page.locator('#stat-pending').innerText()).toBe('0');
      expect(await page.locator('#stat-leased').innerText()).toBe('0');
      expect(await page.locator('#stat-oldest').innerText()).toBe('–');
      const summary = (
        await t.http.get('/outbox/dead-letters/summary').set('x-api-key', API_KEY).expect(200)
      ).body as { groups: Array<{ fingerprint: string; count: number }> };
      const bars = page.locator('#chart svg .bar-group');
      expect(await bars.count()).toBe(summary.groups.length);
      const titles = await page.locator('#chart svg .bar-group title').allTextContents();
      for (const group of summary.groups) {
        expect(titles.some((text) => text.startsWith(group.fingerprint))).toBe(true);
      }
      expect(await page.locator('#by-type').innerText()).toContain('order.placed');
      await shot('stats');
    });

    it('pages through 120 dead letters with the API cursor', async () => {
      await page.locator('[data-nav=list]').click();
      await rows().first().waitFor();
      const seen: string[] = [];
      const sizes: number[] = [];
      await shot('list');
      for (;;) {
        const ids = await rowIds();
        sizes.push(ids.length);
        seen.push(...ids);
        if (await page.locator('#page-next').isDisabled()) break;
        const before = ids[0];
        await page.locator('#page-next').click();
        await page
          .locator('#dead-letters tbody tr')
          .first()
          .and(page.locator(`tr:not([data-id="${before}"])`))
          .waitFor();
      }
      expect(sizes).toEqual([50, 50, 20]);
      expect(new Set(seen).size).toBe(120);
      expect(await page.locator('#page-label').innerText()).toContain('Page 3');
      // Back one page: the same rows as on the way forward.
      await page.locator('#page-prev').click();
      await page.locator('#page-label').filter({ hasText: 'Page 2' }).waitFor();
      expect(await rowIds()).toEqual(seen.slice(50, 100));
      await page.locator('#page-first').click();
      await page.locator('#page-label').filter({ hasText: 'Page 1' }).waitFor();
      expect(await rowIds()).toEqual(seen.slice(0, 50));
    });

    it('filters by type, handler, key and failed-before', async () => {
      await listAfterFilter({ type: 'order.placed', handler: 'Billing.onOrder', key: 'k1' });
      const cells = await rows().evaluateAll((trs) =>
        trs.map((tr) => [...tr.querySelectorAll('td')].slice(2, 5).map((td) => td.textContent)),
      );
      // Orders n = 0..54 with key k(n % 3): 18 have k1.
      expect(cells).toHaveLength(18);
      for (const row of cells) expect(row).toEqual(['order.placed', 'Billing.onOrder', 'k1']);
      expect(page.url()).toContain(
        '#/dead-letters?type=order.placed&handler=Billing.onOrder&key=k1',
      );
      await shot('list-filtered');
      await listAfterFilter({ type: 'order.placed', failedBefore: '2020-01-01T00:00:00' });
      expect(await page.locator('#list-empty').isVisible()).toBe(true);
      expect(await rows().count()).toBe(0);
      await listAfterFilter({ failedBefore: '2999-01-01T00:00:00' });
      expect(await rows().count()).toBe(50);
    });

    it('renders markup from payload, key, headers and errors as text', async () => {
      await listAfterFilter({ key: HOSTILE.key });
      expect(await rows().count()).toBe(1);
      expect(await rows().first().locator('td').nth(4).innerText()).toBe(HOSTILE.key);
      expect(await rows().first().innerText()).toContain(HOSTILE.script);
      await rows().first().click();
      await page.locator('#detail-fields').filter({ hasText: HOSTILE.key }).waitFor();
      const payload = JSON.parse(await page.locator('#detail-payload').innerText());
      expect(payload).toEqual({ n: HOSTILE.script, picture: HOSTILE.img });
      expect(JSON.parse(await page.locator('#detail-headers').innerText())).toEqual({
        note: HOSTILE.header,
      });
      expect(await page.locator('#detail-errors').innerText()).toContain(
        `user ${HOSTILE.script} has no mailbox`,
      );
      // Nothing became an element, and no handler ran.
      expect(await page.locator('main script, main img, main iframe, main b').count()).toBe(0);
      expect(await page.locator('#view-list svg, #view-detail svg').count()).toBe(0);
      expect(await pwned()).toBeUndefined();
      await shot('detail-hostile');
    });

    it('opens one dead letter and replays it: the event is delivered', async () => {
      await listAfterFilter({ type: 'order.placed', handler: 'Shipping.onOrder', key: 'k2' });
      const id = (await rowIds())[0];
      const dead = await t.store.getDeadLetter(id);
      await rows().first().click();
      await page.locator('#detail-id').filter({ hasText: id }).waitFor();
      await page.locator('#detail-errors tbody tr').first().waitFor();
      expect(JSON.parse(await page.locator('#detail-payload').innerText())).toEqual(dead!.payload);
      expect(JSON.parse(await page.locator('#detail-headers').innerText())).toEqual({
        tenant: 't1',
      });
      expect(await page.locator('#detail-errors tbody tr').count()).toBe(dead!.errors.length);
      expect(await page.locator('#detail-errors').innerText()).toContain('NonRetryableError');
      await shot('detail');

      t.behaviour.failing = false;
      await page.locator('#detail-replay').click();
      expect(await confirm()).toContain('Replay this dead letter?');
      await page
        .locator('#notice')
        .filter({ hasText: `Replayed dead letter ${id}` })
        .waitFor();
      // Back on the list, with the filter it came from.
      expect(page.url()).toContain(
        '#/dead-letters?type=order.placed&handler=Shipping.onOrder&key=k2',
      );
      await t.dispatcher.drain();
      expect(t.behaviour.delivered).toEqual([`Shipping:${dead!.eventId}`]);
      expect(await t.store.getDeadLetter(id)).toBeNull();
      expect(await rowIds()).not.toContain(id);
    });

    it('replays and purges a selection', async () => {
      await listAfterFilter({ type: 'order.placed', handler: 'Billing.onOrder' });
      const ids = await rowIds();
      await rows().nth(0).locator('input[type=checkbox]').check();
      await rows().nth(1).locator('input[type=checkbox]').check();
      expect(await page.locator('#purge-selected').innerText()).toBe('Purge selected (2)');
      await page.locator('#purge-selected').click();
      expect(await confirm()).toContain('Purge 2 dead letters?');
      await page.locator('#notice').filter({ hasText: 'Purged 2 dead letters.' }).waitFor();
      expect(await t.store.getDeadLetter(ids[0])).toBeNull();
      expect(await t.store.getDeadLetter(ids[1])).toBeNull();
      expect((await rowIds()).slice(0, 2)).toEqual(ids.slice(2, 4));

      t.behaviour.delivered.length = 0;
      await rows().nth(0).locator('input[type=checkbox]').check();
      await page.locator('#replay-selected').click();
      expect(await confirm()).toContain('Replay 1 dead letter?');
      await page.locator('#notice').filter({ hasText: 'Replayed 1 dead letter.' }).waitFor();
      await t.dispatcher.drain();
      expect(t.behaviour.delivered).toHaveLength(1);
      expect((await t.store.stats()).dead).toBe(120 - 1 - 2 - 1);
    });

    it('replays by filter, and purges one from its detail', async () => {
      await listAfterFilter({ type: 'order.placed', handler: 'Shipping.onOrder', key: 'k0' });
      // Orders n = 0..54 with n % 3 = 0: 19.
      expect(await rows().count()).toBe(19);
      t.behaviour.delivered.length = 0;
      await page.locator('#replay-matching').click();
      expect(await confirm()).toContain('Replay 19 dead letters matching the filter?');
      await page.locator('#notice').filter({ hasText: 'Replayed 19 dead letters.' }).waitFor();
      expect(await page.locator('#list-empty').isVisible()).toBe(true);
      await t.dispatcher.drain();
      expect(t.behaviour.delivered).toHaveLength(19);
      expect(t.behaviour.delivered.every((d) => d.startsWith('Shipping:'))).toBe(true);
      expect((await t.store.stats()).dead).toBe(116 - 19);

      await listAfterFilter({ type: 'order.placed', handler: 'Billing.onOrder' });
      const id = (await rowIds())[0];
      await rows().first().click();
      await page.locator('#detail-id').filter({ hasText: id }).waitFor();
      await page.locator('#detail-body').waitFor();
      await page.locator('#detail-purge').click();
      expect(await confirm()).toContain('Purge this dead letter?');
      await page
        .locator('#notice')
        .filter({ hasText: `Purged dead letter ${id}.` })
        .waitFor();
      expect(await t.store.getDeadLetter(id)).toBeNull();
      expect(await rowIds()).not.toContain(id);
      expect((await t.store.stats()).dead).toBe(97 - 1);
    });

    it('purges by filter after confirming the count', async () => {
      await listAfterFilter({ type: 'user.created' });
      expect(await rows().count()).toBe(10);
      await page.locator('#purge-matching').click();
      await page.locator('#confirm').waitFor({ state: 'visible' });
      await shot('confirm');
      expect(await page.locator('#confirm-all-label').isVisible()).toBe(false);
      expect(await confirm()).toContain('Purge 10 dead letters matching the filter?');
      await page.locator('#notice').filter({ hasText: 'Purged 10 dead letters.' }).waitFor();
      expect(await page.locator('#list-empty').isVisible()).toBe(true);
      expect((await t.store.stats()).dead).toBe(96 - 10);
    });

    it('asks for the match-all confirmation with no filter, and cancel changes nothing', async () => {
      await settle(() => page.locator('#filter-clear').click());
      expect(await page.locator('#filter-summary').innerText()).toContain('no filter');
      await page.locator('#purge-matching').click();
      await page.locator('#confirm').waitFor({ state: 'visible' });
      expect(await page.locator('#confirm-all-label').isVisible()).toBe(true);
      expect(await page.locator('#confirm-ok').isDisabled()).toBe(true);
      expect(await page.locator('#confirm').innerText()).toContain('Purge 86 dead letters');
      await shot('confirm-all');
      await page.locator('#confirm-cancel').click();
      await page.locator('#confirm').waitFor({ state: 'hidden' });
      expect((await t.store.stats()).dead).toBe(86);

      await page.locator('#purge-matching').click();
      expect(await confirm(true)).toContain('every dead letter');
      await page.locator('#notice').filter({ hasText: 'Purged 86 dead letters.' }).waitFor();
      expect((await t.store.stats()).dead).toBe(0);
      expect(await page.locator('#list-empty').isVisible()).toBe(true);
    });

    it('shows 4xx answers of the API', async () => {
      await page.goto(`${dashboard()}#/dead-letters/not-a-uuid`);
      await page.locator('#alert').waitFor({ state: 'visible' });
      expect(await alertText()).toContain('400 Bad Request');
      expect(await alertText()).toContain('id must be a UUID');
      await shot('error');

      const gone = '6f1c3a5e-0b7d-4c2a-9e8f-1a2b3c4d5e6f';
      await page.goto(`${dashboard()}#/dead-letters/${gone}`);
      await page.locator('#alert').filter({ hasText: '404' }).waitFor();
      expect(await alertText()).toContain(`No dead letter with id ${gone}`);

      await page.goto(`${dashboard()}#/dead-letters`);
      await listAfterFilter({ key: 'x'.repeat(513) });
      await page.locator('#alert').filter({ hasText: '400' }).waitFor();
      expect(await alertText()).toContain('key');
    });

    it('logged no script error and no CSP violation', () => {
      // Chromium reports refused inline code and blocked loads on the console.
      expect(consoleProblems.filter((text) => !/status of 40[04]/.test(text))).toEqual([]);
    });
  });
}
