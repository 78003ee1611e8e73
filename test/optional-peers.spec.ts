import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { MissingDependencyError } from '../lib/errors/missing-dependency.error';
import { assertInstalled } from '../lib/optional-peers';
import { TS_REGISTER } from './support/child-process';

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
      const peers = ['typeorm', 'ioredis', 'pg', 'drizzle-orm', 'kysely', '@mikro-orm/core', '@mikro-orm/postgresql', 'knex', '@prisma/client', '@prisma/adapter-pg', '@electric-sql/pglite', 'mysql2', 'better-sqlite3', '@nestjs/typeorm', 'nestjs-cls', '@nestjs-cls/transactional', 'amqplib', 'prom-client', '@nestjs/terminus', '@opentelemetry/api', '@nestjs/event-emitter', '@nestjs/cqrs'];
      console.log(JSON.stringify(peers.filter((p) => loaded.some((f) => f.includes('/node_modules/' + p + '/')))));
    `;
    const out = execFileSync(process.execPath, ['-r', TS_REGISTER, '-e', script], {
      cwd: resolve(__dirname, '..'),
      encoding: 'utf8',
      env: { ...process.env, TS_NODE_PROJECT: 'tsconfig.json' },
    });
    expect(JSON.parse(out.trim().split('\n').pop()!)).toEqual([]);
  });
});

/**
 * Runs `script` in a fresh Node process where the named packages cannot be resolved, as in an app
 * that never installed them; returns what it prints last.
 */
function withoutPackages(hidden: string[], script: string): string {
  const hide = `
    const Module = require('node:module');
    const hidden = new Set(${JSON.stringify(hidden)});
    const resolveFilename = Module._resolveFilename;
    Module._resolveFilename = function (request, ...rest) {
      const parts = request.split('/');
      const name = request.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
      if (hidden.has(name)) {
        throw Object.assign(new Error("Cannot find module '" + request + "'"), { code: 'MODULE_NOT_FOUND' });
      }
      return resolveFilename.call(this, request, ...rest);
    };
  `;
  const out = execFileSync(process.execPath, ['-r', TS_REGISTER, '-e', `${hide}\n${script}`], {
    cwd: resolve(__dirname, '..'),
    encoding: 'utf8',
    env: { ...process.env, TS_NODE_PROJECT: 'tsconfig.json' },
  });
  return out.trim().split('\n').pop()!;
}

describe('missing optional packages are reported together', () => {
  it('MissingDependencyError names every package and one install command', () => {
    const one = new MissingDependencyError('ioredis', 'The redis store');
    expect(one.message).toBe(
      'The redis store needs the optional package "ioredis", which is not installed. ' +
        'Install it with: npm install ioredis',
    );
    const two = new MissingDependencyError(['class-validator', 'class-transformer'], 'Admin');
    expect(two.message).toBe(
      'Admin needs the optional packages "class-validator" and "class-transformer", which are not ' +
        'installed. Install them with: npm install class-validator class-transformer',
    );
    expect(two).toMatchObject({
      packageName: 'class-validator',
      packageNames: ['class-validator', 'class-transformer'],
      feature: 'Admin',
    });
  });

  it('assertInstalled() lists every package that does not resolve, and only those', () => {
    const check = () =>
      assertInstalled('A feature', [
        'class-validator',
        'nestjs-outbox-absent-a',
        'nestjs-outbox-absent-b',
      ]);
    expect(check).toThrow(MissingDependencyError);
    expect(check).toThrow(
      'needs the optional packages "nestjs-outbox-absent-a" and "nestjs-outbox-absent-b"',
    );
    expect(() => assertInstalled('A feature', ['class-validator', 'typeorm'])).not.toThrow();
  });

  const cliWithout = (hidden: string[], url: string) =>
    JSON.parse(
      withoutPackages(
        hidden,
        `
      const { runCli } = require('./lib/cli.ts');
      const lines = [];
      runCli(['schema', 'status', '--url', '${url}'], {
        out: (l) => lines.push(l),
        err: (l) => lines.push(l),
      }).then((code) => console.log(JSON.stringify({ code, lines })));
      `,
      ),
    ) as { code: number; lines: string[] };

  it('the schema CLI on --url sqlite: names typeorm and the driver in one error', () => {
    expect(cliWithout(['typeorm', 'better-sqlite3'], 'sqlite:/tmp/none.db')).toEqual({
      code: 2,
      lines: [
        'nestjs-outbox: The nestjs-outbox schema CLI needs the optional packages "typeorm" and "better-sqlite3", ' +
          'which are not installed. Install them with: npm install typeorm better-sqlite3',
      ],
    });
  });

  it('the schema CLI on --url postgres:// needs only pg (no TypeORM)', () => {
    expect(cliWithout(['typeorm', 'pg'], 'postgres://nobody@127.0.0.1:1/none')).toEqual({
      code: 2,
      lines: [
        'nestjs-outbox: The nestjs-outbox schema CLI (--url postgres://) needs the optional package "pg", ' +
          'which is not installed. Install it with: npm install pg',
      ],
    });
  });

  it('OutboxAdminModule names class-validator and class-transformer in one error', () => {
    const line = withoutPackages(
      ['class-validator', 'class-transformer'],
      `
      require('reflect-metadata');
      const { OutboxAdminModule } = require('./lib/admin/index.ts');
      try {
        OutboxAdminModule.register({ allowUnauthenticated: true });
        console.log(JSON.stringify('registered'));
      } catch (error) {
        console.log(JSON.stringify(error.message));
      }
      `,
    );
    expect(JSON.parse(line)).toBe(
      'OutboxAdminModule needs the optional packages "class-validator" and "class-transformer", ' +
        'which are not installed. Install them with: npm install class-validator class-transformer',
    );
  });

  it('OutboxCqrsModule names @nestjs/cqrs', () => {
    const line = withoutPackages(
      ['@nestjs/cqrs'],
      `
      require('reflect-metadata');
      const { OutboxCqrsModule, OutboxedEvent } = require('./lib/index.ts');
      // The decorator alone needs nothing: event classes may live in a package without the peer.
      OutboxedEvent({ type: 'order.placed' })(class OrderPlaced {});
      try {
        OutboxCqrsModule.forRoot();
        console.log(JSON.stringify('registered'));
      } catch (error) {
        console.log(JSON.stringify(error.message));
      }
      `,
    );
    expect(JSON.parse(line)).toBe(
      'OutboxCqrsModule needs the optional package "@nestjs/cqrs", which is not installed. ' +
        'Install it with: npm install @nestjs/cqrs',
    );
  });
});

describe('@nestjs/schedule, a required peer, missing from node_modules', () => {
  it('the dispatcher names the install command as well as ScheduleModule.forRoot()', () => {
    const line = withoutPackages(
      ['@nestjs/schedule'],
      `
      require('reflect-metadata');
      const { Test } = require('@nestjs/testing');
      const { OutboxModule } = require('./lib/index.ts');
      (async () => {
        const moduleRef = await Test.createTestingModule({
          imports: [OutboxModule.forRoot({ store: { type: 'memory' } })],
        }).compile();
        const app = moduleRef.createNestApplication({ logger: false });
        try {
          await app.init();
          console.log(JSON.stringify({ booted: true }));
        } catch (error) {
          console.log(JSON.stringify({ field: error.field, message: error.message }));
        } finally {
          await app.close().catch(() => undefined);
        }
      })();
      `,
    );
    expect(JSON.parse(line)).toEqual({
      field: 'dispatcher',
      message:
        'Invalid OutboxModule option "dispatcher": The outbox dispatcher needs @nestjs/schedule, which ' +
        'is not installed: npm install @nestjs/schedule, then add ScheduleModule.forRoot() to your root ' +
        'module imports (or set dispatcher.enabled: false in processes that only append).',
    });
  });
});

/** Runs an app on the memory store in a fresh process with `options`, then `after(app)`. */
const bootApp = (options: string, after = '() => undefined') => `
  require('reflect-metadata');
  const { Test } = require('@nestjs/testing');
  const { ScheduleModule } = require('@nestjs/schedule');
  const { OutboxModule, OutboxHealthIndicator } = require('./lib/index.ts');
  (async () => {
    let app;
    try {
      const moduleRef = await Test.createTestingModule({
        imports: [ScheduleModule.forRoot(), OutboxModule.forRoot({ store: { type: 'memory' }, ${options} })],
      }).compile();
      app = moduleRef.createNestApplication({ logger: false });
      await app.init();
      const result = await (${after})(app, OutboxHealthIndicator);
      const loaded = Object.keys(require.cache);
      const peers = ['prom-client', '@nestjs/terminus', '@opentelemetry/api', '@nestjs/event-emitter'];
      console.log(JSON.stringify({ result, loaded: peers.filter((p) => loaded.some((f) => f.includes('/node_modules/' + p + '/'))) }));
    } catch (error) {
      console.log(JSON.stringify({ error: error.message }));
    } finally {
      await app?.close();
    }
  })();
`;

describe('observability integrations are optional peers', () => {
  const all = ['prom-client', '@nestjs/terminus', '@opentelemetry/api', '@nestjs/event-emitter'];

  it('an app with default options loads none of them, even when installed', () => {
    expect(JSON.parse(withoutPackages([], bootApp('')))).toEqual({ loaded: [] });
  });

  it('an app with default options runs when none of them is installed', () => {
    expect(JSON.parse(withoutPackages(all, bootApp('')))).toEqual({ loaded: [] });
  });

  it('each integration, turned on without its package, names it and the install command', () => {
    expect(JSON.parse(withoutPackages(all, bootApp('metrics: true')))).toEqual({
      error:
        'Outbox metrics (the metrics option) needs the optional package "prom-client", which is not installed. ' +
        'Install it with: npm install prom-client',
    });
    expect(JSON.parse(withoutPackages(all, bootApp('tracing: true')))).toEqual({
      error:
        'Outbox tracing (the tracing option) needs the optional package "@opentelemetry/api", which is not installed. ' +
        'Install it with: npm install @opentelemetry/api',
    });
    const health = '(app, Indicator) => app.get(Indicator).isHealthy()';
    expect(JSON.parse(withoutPackages(all, bootApp('', health)))).toEqual({
      error:
        'OutboxHealthIndicator needs the optional package "@nestjs/terminus", which is not installed. ' +
        'Install it with: npm install @nestjs/terminus',
    });
  });

  it('each integration loads only its own package', () => {
    // (prom-client 15 itself depends on @opentelemetry/api, for exemplars.)
    expect(JSON.parse(withoutPackages([], bootApp('metrics: true'))).loaded).toEqual([
      'prom-client',
      '@opentelemetry/api',
    ]);
    expect(JSON.parse(withoutPackages([], bootApp('tracing: true'))).loaded).toEqual([
      '@opentelemetry/api',
    ]);
    const health =
      '(app, Indicator) => app.get(Indicator).isHealthy().then((r) => r.outbox.status)';
    expect(JSON.parse(withoutPackages([], bootApp('', health)))).toEqual({
      result: 'up',
      loaded: ['@nestjs/terminus'],
    });
  });
});

describe('@nestjs-cls/transactional is looked for only when the app loaded it', () => {
  // nestjs-cls enables an AsyncLocalStorage when it loads, which puts async hooks on every promise
  // of the process (measured: 2.5–4× the cost of an await). An app that never imported it must
  // not pay for that because append() looked for a @Transactional() transaction to join.
  it('an append without a manager on a TypeORM store, installed but unused: neither is loaded', () => {
    const line = withoutPackages(
      [],
      `
      require('reflect-metadata');
      const { Test } = require('@nestjs/testing');
      const { DataSource } = require('typeorm');
      const { OutboxModule, OutboxService } = require('./lib/index.ts');
      (async () => {
        const dataSource = await new DataSource({ type: 'better-sqlite3', database: ':memory:' }).initialize();
        const moduleRef = await Test.createTestingModule({
          imports: [OutboxModule.forRoot({ store: { type: 'typeorm', dataSource, ensureSchema: true }, dispatcher: { enabled: false } })],
        }).compile();
        const app = moduleRef.createNestApplication({ logger: false });
        await app.init();
        await app.get(OutboxService).append({ type: 'noted', payload: {} });
        const loaded = Object.keys(require.cache);
        console.log(JSON.stringify(['nestjs-cls', '@nestjs-cls/transactional'].filter((p) => loaded.some((f) => f.includes('/node_modules/' + p + '/')))));
        await app.close();
        await dataSource.destroy();
      })();
      `,
    );
    expect(JSON.parse(line)).toEqual([]);
  });
});
