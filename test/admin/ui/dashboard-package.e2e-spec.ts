import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Test } from '@nestjs/testing';
import request from 'supertest';

/**
 * The dashboard files are not TypeScript, so `tsc` alone would leave them out of `dist`; the build
 * script copies them. This runs the real `npm run build`, checks what `npm pack` would publish,
 * and serves the page from the built package.
 */
describe('dashboard in the built package', () => {
  const root = resolve(__dirname, '../../..');
  const assets = join(root, 'lib/admin/ui/assets');
  const files = ['dashboard.html', 'dashboard.js', 'dashboard.css', 'favicon.svg'];

  beforeAll(() => {
    execFileSync('npm', ['run', 'build'], { cwd: root, stdio: 'pipe', timeout: 180_000 });
  }, 200_000);

  it('npm pack ships the dashboard files', () => {
    const [packed] = JSON.parse(
      execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
        cwd: root,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
    ) as Array<{ files: Array<{ path: string }> }>;
    const paths = packed.files.map((f) => f.path);
    for (const file of files) expect(paths).toContain(`dist/admin/ui/assets/${file}`);
    expect(paths).toContain('dist/admin/ui/outbox-admin-ui.controller.js');
    expect(paths.filter((p) => p.startsWith('lib/'))).toEqual([]);
  });

  it('the built module serves the page and its files, as in the source', async () => {
    const dist = require(join(root, 'dist/index.js')) as typeof import('nestjs-outbox');
    const moduleRef = await Test.createTestingModule({
      imports: [
        dist.OutboxModule.forRoot({ store: { type: 'memory' }, dispatcher: { enabled: false } }),
        dist.OutboxAdminModule.register({
          guards: [{ canActivate: (ctx) => ctx.switchToHttp().getRequest().headers.k === 'v' }],
          ui: true,
        }),
      ],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    try {
      const http = request(app.getHttpServer());
      const paths: Record<string, string> = {
        'dashboard.html': '/outbox/ui',
        'dashboard.js': '/outbox/ui/dashboard.js',
        'dashboard.css': '/outbox/ui/dashboard.css',
        'favicon.svg': '/outbox/ui/favicon.svg',
      };
      for (const file of files) {
        // Read as text whatever the type (supertest buffers image/svg+xml as bytes).
        const res = await http
          .get(paths[file])
          .set('k', 'v')
          .buffer(true)
          .parse((r, done) => {
            let text = '';
            r.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
            r.on('end', () => done(null, text));
          })
          .expect(200);
        expect(res.body).toBe(readFileSync(join(assets, file), 'utf8'));
        expect(res.headers['content-security-policy']).toContain("script-src 'self'");
        await http.get(paths[file]).expect(403);
      }
    } finally {
      await app.close();
    }
  });
});
