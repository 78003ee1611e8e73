import { describeAdminFuzz } from './admin-fuzz.suite';

describe('Admin API fuzz [memory store]', () => {
  let now = Date.parse('2026-03-01T12:00:00Z');
  describeAdminFuzz({
    store: async () => ({ type: 'memory', clock: () => new Date(now) }),
    advance: async () => {
      now += 60_000;
    },
  });
});
