import { describeAdminApi } from './admin-api.suite';

describe('Admin API [memory store]', () => {
  // A hand-moved clock: whole batches share one deadAt, so keyset ties are broken by id.
  let now = Date.parse('2026-03-01T12:00:00Z');
  describeAdminApi({
    store: async () => ({ type: 'memory', clock: () => new Date(now) }),
    advance: async () => {
      now += 60_000;
    },
  });
});
