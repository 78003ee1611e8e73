import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { TS_REGISTER } from '../support/child-process';

/**
 * class-validator and class-transformer are optional peers needed only by the admin API: importing
 * it costs nothing until `OutboxAdminModule.register()` mounts the controller.
 */
it('loads class-validator and class-transformer only when the admin module is registered', () => {
  const script = `
    require('reflect-metadata');
    const peers = ['class-validator', 'class-transformer'];
    const loaded = () => peers.filter((p) => Object.keys(require.cache).some((f) => f.includes('/node_modules/' + p + '/')));
    const { OutboxAdminModule } = require('./lib/admin/index.ts');
    const before = loaded();
    OutboxAdminModule.register({ allowUnauthenticated: true });
    console.log(JSON.stringify({ before, after: loaded() }));
  `;
  const out = execFileSync(process.execPath, ['-r', TS_REGISTER, '-e', script], {
    cwd: resolve(__dirname, '../..'),
    encoding: 'utf8',
    env: { ...process.env, TS_NODE_PROJECT: 'tsconfig.json' },
  });
  expect(JSON.parse(out.trim().split('\n').pop()!)).toEqual({
    before: [],
    after: ['class-validator', 'class-transformer'],
  });
});
