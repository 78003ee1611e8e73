import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { AppendableEvent } from 'nestjs-outbox';
import { describeWithService } from '../../support/services';
import { openDataSource, storeFor, uniquePrefix } from './typeorm-test-helpers';

/**
 * A claim that runs while the caller's transaction is still open probes, sees nothing
 * (uncommitted) and starts a quiet period; the commit of this process's own placeholder must end
 * it, so the wake-up claim right after the commit finds it.
 */
describeWithService(
  'postgres',
  'typeorm: expansion throttle vs own placeholder in an open tx',
  () => {
    let ds: DataSource;
    let h: Awaited<ReturnType<typeof storeFor>>;
    const H = { name: 'H', types: ['t.own'] };
    beforeAll(async () => {
      ds = await openDataSource('postgres');
      h = await storeFor(ds, uniquePrefix('thr2'));
    });
    afterAll(async () => {
      await h.drop();
      await ds.destroy();
    });

    it('claims a placeholder this process committed, right after the commit', async () => {
      const e: AppendableEvent = {
        id: randomUUID(),
        type: 't.own',
        payload: {},
        key: null,
        headers: {},
        occurredAt: new Date(),
        availableAt: null,
        handlers: [],
      };
      const claim = () =>
        h.store.claim({ workerId: 'w', handlers: [H], limit: 10, leaseMs: 30_000 });
      const off = h.store.onAppended(() => undefined); // as the dispatcher does
      await ds.transaction(async (manager) => {
        await h.store.append([e], { manager });
        // The poll loop claims while the caller's transaction is still open (it always may).
        expect(await claim()).toEqual([]);
      });
      // Committed by this very process: the wake-up claim should find it.
      expect((await claim()).map((c) => c.event.id)).toEqual([e.id]);
      off();
    });
  },
);
