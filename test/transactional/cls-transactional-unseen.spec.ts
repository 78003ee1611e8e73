import { join } from 'node:path';
import { describeWithService } from '../support/services';
import { forkFixture } from '../support/child-process';

/**
 * The outbox looks for @nestjs-cls/transactional's TransactionHost only when the app loaded the
 * package (loading it for an app that did not would slow every promise). A copy the library's
 * require.cache does not show — an app bundle, an isolated module registry — must still be found:
 * otherwise an append in a @Transactional() method would commit on its own and survive the
 * rollback. (A child process: Jest's require.cache cannot forget a module.)
 */
describeWithService(
  'postgres',
  '@nestjs-cls/transactional loaded where the library cannot see it',
  () => {
    it('an append in a @Transactional() method still joins it and rolls back with it', async () => {
      const child = forkFixture(join(__dirname, 'fixtures', 'unseen-cls.ts'));
      try {
        expect(await child.next()).toEqual({
          unseen: true,
          failed: 'rolled back after the append',
          stored: ['o-2'],
        });
        expect((await child.exited).code).toBe(0);
      } finally {
        await child.kill();
      }
    }, 60_000);
  },
);
