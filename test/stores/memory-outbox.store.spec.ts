import { describeOutboxStoreContract } from 'nestjs-outbox/testing';
import { MemoryOutboxStore } from '../../lib/stores/memory/memory-outbox.store';

describeOutboxStoreContract('memory', async () => {
  let now = Date.parse('2026-06-01T00:00:00.000Z');
  const store = new MemoryOutboxStore({ clock: () => new Date(now) });
  return {
    store,
    advance: async (ms) => {
      now += ms;
    },
  };
});
