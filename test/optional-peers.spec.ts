import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';

/**
 * Optional peers load only for the store or feature that needs them: an app on the memory store
 * must not pull in typeorm, ioredis, a database driver or the microservices package.
 */
describe('optional peer dependencies', () => {
  it('importing the public barrel loads none of them', () => {
    const script = `
      require('reflect-metadata');
      require('./lib/index.ts');
      const loaded = Object.keys(require.cache);
      // (@nestjs/core itself loads @nestjs/microservices when installed, so it is not checked here.)
      const peers = ['typeorm', 'ioredis', 'pg', 'mysql2', 'better-sqlite3', '@nestjs/typeorm', 'nestjs-cls', '@nestjs-cls/transactional', 'amqplib'];
      console.log(JSON.stringify(peers.filter((p) => loaded.some((f) => f.includes('/node_modules/' + p + '/')))));
    `;
    const out = execFileSync(
      process.execPath,
      ['-r', 'ts-node/register/transpile-only', '-e', script],
      {
        cwd: resolve(__dirname, '..'),
        encoding: 'utf8',
        env: { ...process.env, TS_NODE_PROJECT: 'tsconfig.json' },
      },
    );
    expect(JSON.parse(out.trim().split('\n').pop()!)).toEqual([]);
  });
});
