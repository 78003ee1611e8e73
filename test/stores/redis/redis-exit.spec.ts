import { join } from 'node:path';
import { forkFixture } from '../../support/child-process';
import { describeWithService } from '../../support/services';
import { connect, dropPrefix, uniquePrefix } from './redis-test-support';

/**
 * Closing the app closes the Redis store's connections at once: the process exits by itself,
 * without a timer of ioredis keeping it alive for its disconnect timeout (2 s) after a wake-up
 * subscriber's QUIT raced its socket's close.
 */
describeWithService('redis', 'redis store, process exit after app.close()', () => {
  it.each([1, 2])(
    'with %s app(s) listening for wake-ups, the process exits at once',
    async (apps) => {
      const prefix = uniquePrefix('exit');
      const child = forkFixture(join(__dirname, 'fixtures', 'redis-exit.ts'), {
        EXIT_PREFIX: prefix,
        EXIT_APPS: String(apps),
      });
      const client = connect();
      try {
        const { closed, handled } = await child.next<{ closed: number; handled: number }>(
          undefined,
          20_000,
        );
        expect(handled).toBe(apps);
        const gone = await Promise.race([
          child.exited.then(() => Date.now()),
          new Promise<null>((done) => setTimeout(() => done(null), 10_000)),
        ]);
        expect(gone === null ? 'still running after 10 s' : gone - closed).toBeLessThan(1_000);
        expect(await child.exited).toEqual({ code: 0, signal: null });
      } finally {
        await child.kill();
        await dropPrefix(client, prefix);
        client.disconnect();
      }
    },
    40_000,
  );
});
