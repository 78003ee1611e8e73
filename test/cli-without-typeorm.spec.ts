import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import { createPool } from 'mysql2/promise';
import { Pool } from 'pg';
import { TS_REGISTER } from './support/child-process';
import { describeWithService, SERVICES } from './support/services';

/**
 * `schema migrate` and `schema status` with `--url postgres://` or `mariadb://` run on the
 * driver's own pool (pg, mysql2), so an app on Prisma, Drizzle, Kysely or MikroORM migrates
 * without TypeORM: here in a process where `typeorm` cannot be resolved at all.
 */
function cliWithoutTypeorm(...argv: string[]): { code: number; out: string } {
  const script = `
    const Module = require('node:module');
    const resolveFilename = Module._resolveFilename;
    Module._resolveFilename = function (request, ...rest) {
      if (request === 'typeorm' || request.startsWith('typeorm/') || request === '@nestjs/typeorm') {
        throw Object.assign(new Error("Cannot find module '" + request + "'"), { code: 'MODULE_NOT_FOUND' });
      }
      return resolveFilename.call(this, request, ...rest);
    };
    const lines = [];
    require('./lib/cli.ts')
      .runCli(${JSON.stringify(argv)}, { out: (l) => lines.push(l), err: (l) => lines.push(l) })
      .then((code) => console.log(JSON.stringify({ code, out: lines.join('\\n') })));
  `;
  const out = execFileSync(process.execPath, ['-r', TS_REGISTER, '-e', script], {
    cwd: resolve(__dirname, '..'),
    encoding: 'utf8',
    env: { ...process.env, TS_NODE_PROJECT: 'tsconfig.json' },
  });
  return JSON.parse(out.trim().split('\n').pop()!) as { code: number; out: string };
}

const prefix = () => `cli_nt_${randomBytes(3).toString('hex')}_`;

describeWithService('postgres', 'schema CLI without TypeORM on PostgreSQL', () => {
  const user = process.env.PGUSER ?? 'postgres';
  const url = `postgres://${user}@${SERVICES.postgres.host}:${SERVICES.postgres.port}/${process.env.PGDATABASE ?? 'test'}`;
  const pool = new Pool({ connectionString: url });
  const p = prefix();
  afterAll(async () => {
    for (const table of ['inbox', 'deliveries', 'dead_letters', 'events', 'schema_version']) {
      await pool.query(`DROP TABLE IF EXISTS ${p}${table} CASCADE`);
    }
    await pool.end();
  });

  it('migrates and reports the outbox and inbox tables through pg', () => {
    expect(cliWithoutTypeorm('schema', 'status', '--url', url, '--prefix', p).code).toBe(1);
    const migrated = cliWithoutTypeorm('schema', 'migrate', '--url', url, '--prefix', p);
    expect(migrated).toEqual({
      code: 0,
      out: expect.stringMatching(
        /outbox tables created \(schema version \d+\)\ninbox table .*created/,
      ),
    });
    const status = cliWithoutTypeorm('schema', 'status', '--url', url, '--prefix', p);
    expect(status.code).toBe(0);
    expect(status.out).toMatch(/up to date[\s\S]*inbox table .*: up to date/);
  });
});

describeWithService('mariadb', 'schema CLI without TypeORM on MariaDB', () => {
  const m = SERVICES.mariadb;
  const user = process.env.MYSQL_USER ?? 'root';
  const password = process.env.MYSQL_PASSWORD ? `:${process.env.MYSQL_PASSWORD}` : '';
  const url = `mariadb://${user}${password}@${m.host}:${m.port}/${process.env.MYSQL_DATABASE ?? 'test'}`;
  const pool = createPool({ uri: url.replace(/^mariadb:/, 'mysql:') });
  const p = prefix();
  afterAll(async () => {
    for (const table of ['inbox', 'deliveries', 'dead_letters', 'events', 'schema_version']) {
      await pool.query(`DROP TABLE IF EXISTS ${p}${table}`);
    }
    await pool.end();
  });

  it('migrates and reports the outbox and inbox tables through mysql2, and prints the DDL', () => {
    const migrated = cliWithoutTypeorm('schema', 'migrate', '--url', url, '--prefix', p);
    expect(migrated.code).toBe(0);
    expect(migrated.out).toMatch(/outbox tables created/);
    expect(cliWithoutTypeorm('schema', 'status', '--url', url, '--prefix', p).code).toBe(0);
    const sql = cliWithoutTypeorm('schema', 'sql', '--outbox', '--url', url, '--prefix', p);
    expect(sql.code).toBe(0);
    expect(sql.out).toContain(`CREATE TABLE IF NOT EXISTS \`${p}events\``);
  });
});
