import { describeAdminConsole } from './admin-console.suite';

describe('Admin console API [memory store]', () => {
  describeAdminConsole({
    store: async () => ({ type: 'memory' }),
    advance: async () => undefined,
  });
});
