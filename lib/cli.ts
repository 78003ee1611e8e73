#!/usr/bin/env node
/**
 * `nestjs-outbox schema sql|migrate|status`: prints, applies or checks the outbox tables of the
 * TypeORM store. `status` exits 1 when the schema is missing or behind, so deploy pipelines can
 * gate on it; production never migrates unless someone runs `migrate`.
 */
import { resolve } from 'node:path';
import type { DataSource, DataSourceOptions } from 'typeorm';
import { assertInstalled } from './optional-peers';
import { dialectName, schemaStatements } from './stores/typeorm/dialects';
import { DialectName } from './stores/typeorm/dialects/sql-dialect';
import { ensureOutboxSchema, outboxSchemaStatus } from './stores/typeorm/typeorm-outbox.schema';
import { OutboxTableOptions } from './stores/typeorm/typeorm-outbox.tables';

export interface CliIo {
  out(line: string): void;
  err(line: string): void;
}

const USAGE = `Usage: nestjs-outbox schema <sql|migrate|status> [options]

  schema sql      print the DDL (no connection needed)
  schema migrate  create missing outbox tables and indexes (safe to run concurrently)
  schema status   exit 0 when up to date, 1 when missing or behind, 2 on error

Options:
  --dialect <postgres|mysql|mariadb|sqlite>   for "schema sql" (default: from the connection)
  --data-source <file>   module exporting a TypeORM DataSource (default export, dataSource or AppDataSource)
  --url <url>            postgres://…, mysql://…, mariadb://… or sqlite:<file>
  --prefix <prefix>      table prefix (default outbox_)
  --schema <schema>      PostgreSQL schema
`;

function parseArgs(argv: string[]): { positional: string[]; flags: Record<string, string> } {
  const positional: string[] = [];
  const flags: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg.startsWith('--')) {
      const [name, inline] = arg.slice(2).split('=', 2);
      flags[name] = inline ?? argv[++i] ?? '';
    } else {
      positional.push(arg);
    }
  }
  return { positional, flags };
}

/** Driver package TypeORM loads for each `--url` connection type. */
const DRIVER_PACKAGES: Record<string, string> = {
  postgres: 'pg',
  mysql: 'mysql2',
  mariadb: 'mysql2',
  'better-sqlite3': 'better-sqlite3',
};

function loadTypeOrm(driver?: string): typeof import('typeorm') {
  assertInstalled('The nestjs-outbox schema CLI', driver ? ['typeorm', driver] : ['typeorm']);
  return require('typeorm') as typeof import('typeorm');
}

function optionsFromUrl(url: string): DataSourceOptions {
  if (url.startsWith('sqlite:'))
    return { type: 'better-sqlite3', database: url.slice('sqlite:'.length) };
  const scheme = url.split(':', 1)[0];
  if (scheme === 'postgres' || scheme === 'postgresql') return { type: 'postgres', url };
  if (scheme === 'mysql' || scheme === 'mariadb') return { type: scheme, url };
  throw new Error(
    `unsupported --url scheme "${scheme}:"; use postgres://, mysql://, mariadb:// or sqlite:<file>`,
  );
}

async function openDataSource(flags: Record<string, string>): Promise<DataSource> {
  if (flags['data-source']) {
    const file = resolve(flags['data-source']);
    if (/\.[cm]?ts$/.test(file)) {
      try {
        require('ts-node/register');
      } catch {
        // Without ts-node the require below fails with a clear "cannot find module" anyway.
      }
    }
    const mod = require(file) as Record<string, unknown>;
    const candidate = [mod.default, mod.dataSource, mod.AppDataSource, ...Object.values(mod)].find(
      (v) => !!v && typeof v === 'object' && typeof (v as DataSource).initialize === 'function',
    ) as DataSource | undefined;
    if (!candidate) throw new Error(`${file} exports no TypeORM DataSource`);
    return candidate.isInitialized ? candidate : candidate.initialize();
  }
  if (flags.url) {
    const options = optionsFromUrl(flags.url);
    const { DataSource: DataSourceClass } = loadTypeOrm(DRIVER_PACKAGES[options.type]);
    return new DataSourceClass(options).initialize();
  }
  throw new Error('give --data-source <file> or --url <url>');
}

/** Runs the CLI; returns the process exit code. */
export async function runCli(
  argv: string[],
  io: CliIo = { out: console.log, err: console.error },
): Promise<number> {
  const { positional, flags } = parseArgs(argv);
  const [group, command] = positional;
  if (group !== 'schema' || !command || flags.help !== undefined) {
    io.err(USAGE);
    return group === undefined || flags.help !== undefined ? 0 : 2;
  }
  const tables: OutboxTableOptions = { tablePrefix: flags.prefix, schema: flags.schema };
  try {
    if (command === 'sql' && flags.dialect) {
      for (const ddl of schemaStatements(dialectName(flags.dialect) as DialectName, tables).create)
        io.out(`${ddl};`);
      return 0;
    }
    if (command !== 'sql' && command !== 'migrate' && command !== 'status') {
      io.err(USAGE);
      return 2;
    }
    const dataSource = await openDataSource(flags);
    try {
      if (command === 'sql') {
        for (const ddl of schemaStatements(dialectName(dataSource.options.type), tables).create)
          io.out(`${ddl};`);
        return 0;
      }
      if (command === 'migrate') {
        await ensureOutboxSchema(dataSource, tables);
        io.out('outbox schema is up to date');
        return 0;
      }
      const status = await outboxSchemaStatus(dataSource, tables);
      if (status.upToDate) {
        io.out(`outbox schema version ${status.current} (expected ${status.expected}): up to date`);
        return 0;
      }
      io.out(
        status.current === null
          ? `outbox tables not found (expected version ${status.expected}); run: nestjs-outbox schema migrate`
          : `outbox schema version ${status.current} is behind ${status.expected}; run: nestjs-outbox schema migrate`,
      );
      return 1;
    } finally {
      await dataSource.destroy();
    }
  } catch (error) {
    io.err(`nestjs-outbox: ${(error as Error).message}`);
    return 2;
  }
}

if (require.main === module) {
  runCli(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error: unknown) => {
      console.error(error);
      process.exit(2);
    },
  );
}
