#!/usr/bin/env node
/**
 * `nestjs-outbox schema sql|migrate|status`: prints, applies or checks the outbox tables of the
 * TypeORM store and the inbox table of `@Inbox()` (both unless `--outbox` or `--inbox` picks one).
 * `status` exits 1 when a schema is missing or behind, so deploy pipelines can gate on it;
 * production never migrates unless someone runs `migrate`.
 */
import { resolve } from 'node:path';
import type { DataSource, DataSourceOptions } from 'typeorm';
import { IDENTIFIER, inboxDialectFor } from './inbox/dialects';
import {
  ensureInboxSchema,
  INBOX_SCHEMA_VERSION,
  InboxStore,
  InboxTableOptions,
} from './inbox/inbox.store';
import { mysql2Executor } from './executors/mysql2-executor';
import { pgExecutor } from './executors/pg-executor';
import type { SqlExecutor } from './executors/sql-executor';
import { assertInstalled } from './optional-peers';
import { dialectName, schemaStatements } from './stores/typeorm/dialects';
import { DialectName } from './stores/typeorm/dialects/sql-dialect';
import {
  ensureOutboxSchema,
  OUTBOX_SCHEMA_VERSION,
  OutboxSchemaStatus,
  outboxSchemaStatus,
} from './stores/typeorm/schema/schema';
import { OutboxTableOptions } from './stores/typeorm/schema/tables';

export interface CliIo {
  out(line: string): void;
  err(line: string): void;
}

const USAGE = `Usage: nestjs-outbox schema <sql|migrate|status> [--outbox] [--inbox] [options]

  schema sql      print the DDL (no connection needed with --dialect), for a migration file
  schema migrate  create missing tables and indexes (safe to run concurrently)
  schema status   exit 0 when up to date, 1 when missing or behind, 2 on error

Which tables (default: both):
  --outbox    only the outbox tables (events, deliveries, schema version)
  --inbox     only the inbox table of @Inbox()
  Without either, "status" checks the outbox and the inbox where the database has them, and
  fails only when it has neither.

Options:
  --dialect <postgres|mysql|mariadb|sqlite>   for "schema sql" (default: from the connection)
  --data-source <file>   module exporting a TypeORM DataSource (default export, dataSource or AppDataSource)
  --url <url>            postgres://…, mysql://…, mariadb://… or sqlite:<file>
  --prefix <prefix>      table prefix of both (default outbox_: outbox_events, outbox_inbox, …)
  --schema <schema>      PostgreSQL schema
  --upgrade              with "schema sql": the steps that bring outbox tables of an earlier
                         version (see "schema status") to this one, instead of creating them;
                         with --inbox, the step that brings a version-1 inbox table to version 2
`;

const VALUE_FLAGS = new Set(['dialect', 'data-source', 'url', 'prefix', 'schema']);
const BOOLEAN_FLAGS = new Set(['outbox', 'inbox', 'help', 'upgrade']);

interface Args {
  positional: string[];
  flags: Record<string, string>;
  switches: Set<string>;
}

function parseArgs(argv: string[]): Args {
  const positional: string[] = [];
  const flags: Record<string, string> = {};
  const switches = new Set<string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) {
      positional.push(arg);
      continue;
    }
    const [name, inline] = arg.slice(2).split('=', 2);
    if (BOOLEAN_FLAGS.has(name)) {
      // A switch never takes the next argument as its value: `--inbox --url x` keeps --url.
      if (inline !== undefined) throw new UsageError(`--${name} takes no value`);
      switches.add(name);
    } else if (VALUE_FLAGS.has(name)) {
      const value = inline ?? argv[++i];
      if (value === undefined || value.startsWith('--')) {
        throw new UsageError(`--${name} needs a value`);
      }
      flags[name] = value;
    } else {
      throw new UsageError(`unknown option --${name}`);
    }
  }
  return { positional, flags, switches };
}

class UsageError extends Error {}

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

/**
 * What a command runs on: a TypeORM DataSource (`--data-source`, `sqlite:`), or, for a
 * `postgres://` / `mysql://` / `mariadb://` URL, a pool of the driver itself behind its executor,
 * so an app on Prisma, Drizzle, Kysely or MikroORM needs no TypeORM to migrate.
 */
interface CliConnection {
  source: DataSource | SqlExecutor;
  dialect: DialectName;
  /** `SELECT VERSION()` on MySQL/MariaDB (their NO PAD collations differ), else undefined. */
  serverVersion(): Promise<string | undefined>;
  close(): Promise<void>;
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
  const options = optionsFromUrl(flags.url);
  const { DataSource: DataSourceClass } = loadTypeOrm(DRIVER_PACKAGES[options.type]);
  return new DataSourceClass(options).initialize();
}

function fromDataSource(dataSource: DataSource): CliConnection {
  const dialect = dialectName(dataSource.options.type);
  return {
    source: dataSource,
    dialect,
    serverVersion: async () =>
      dialect === 'mysql'
        ? String((await dataSource.query('SELECT VERSION() AS v'))[0]?.v ?? '')
        : undefined,
    close: () => dataSource.destroy(),
  };
}

async function openConnection(flags: Record<string, string>): Promise<CliConnection> {
  if (!flags['data-source'] && !flags.url)
    throw new Error('give --data-source <file> or --url <url>');
  const scheme = flags.url?.split(':', 1)[0];
  if (flags['data-source'] || scheme === 'sqlite')
    return fromDataSource(await openDataSource(flags));
  optionsFromUrl(flags.url); // refuses an unknown scheme with the list of known ones
  if (scheme === 'postgres' || scheme === 'postgresql') {
    assertInstalled('The nestjs-outbox schema CLI (--url postgres://)', ['pg']);
    const { Pool } = require('pg') as typeof import('pg');
    const pool = new Pool({ connectionString: flags.url, max: 2 });
    return {
      source: pgExecutor(pool),
      dialect: 'postgres',
      serverVersion: async () => undefined,
      close: () => pool.end(),
    };
  }
  assertInstalled(`The nestjs-outbox schema CLI (--url ${scheme}://)`, ['mysql2']);
  const { createPool } = require('mysql2/promise') as typeof import('mysql2/promise');
  const pool = createPool({ uri: flags.url, connectionLimit: 2 });
  return {
    source: mysql2Executor(pool),
    dialect: 'mysql',
    serverVersion: async () => {
      const [rows] = await pool.query('SELECT VERSION() AS v');
      return String((rows as Array<{ v?: unknown }>)[0]?.v ?? '');
    },
    close: () => pool.end(),
  };
}

/** The parts a command works on; `explicit` when chosen with --outbox / --inbox. */
interface Parts {
  outbox: boolean;
  inbox: boolean;
  explicit: boolean;
}

function partsOf(switches: Set<string>): Parts {
  const outbox = switches.has('outbox');
  const inbox = switches.has('inbox');
  if (!outbox && !inbox) return { outbox: true, inbox: true, explicit: false };
  return { outbox, inbox, explicit: true };
}

function outboxTables(flags: Record<string, string>): OutboxTableOptions {
  return { tablePrefix: flags.prefix, schema: flags.schema };
}

/** The inbox table under the CLI's --prefix / --schema, checked as the inbox options are. */
function inboxTableOptions(flags: Record<string, string>): InboxTableOptions {
  const tablePrefix = flags.prefix ?? 'outbox_';
  if (tablePrefix !== '' && !IDENTIFIER.test(tablePrefix)) {
    throw new Error(
      `--prefix "${tablePrefix}" must be up to 48 letters, digits or underscores, not starting with a digit`,
    );
  }
  if (flags.schema !== undefined && !IDENTIFIER.test(flags.schema)) {
    throw new Error(`--schema "${flags.schema}" must be a plain identifier`);
  }
  return { tablePrefix, schema: flags.schema };
}

/**
 * `server` names the MySQL-family server when known (`mysql`, `mariadb`, or `SELECT VERSION()`):
 * the two spell their NO PAD binary collation differently. The outbox part ends by recording the
 * schema version, as `schema migrate` does, so a store with `ensureSchema: false` accepts the
 * tables. `upgrade`: what `schema migrate` runs on tables of an earlier version (missing tables
 * and indexes, then each upgrade step). The inbox's one upgrade step (version 1 to 2, a column) is
 * not idempotent on every dialect, so it is printed only when asked for by name (`--inbox`).
 */
function printSql(
  io: CliIo,
  name: DialectName,
  parts: Parts,
  flags: Record<string, string>,
  server: string | undefined,
  upgrade: boolean,
): void {
  if (parts.outbox) {
    const ddl = schemaStatements(name, outboxTables(flags), server);
    io.out(
      upgrade
        ? `-- outbox tables: upgrade from an earlier version to version ${OUTBOX_SCHEMA_VERSION}`
        : '-- outbox tables',
    );
    for (const statement of ddl.create) io.out(`${statement};`);
    if (upgrade) for (const statement of ddl.upgrade) io.out(`${statement};`);
    io.out(`${ddl.record(OUTBOX_SCHEMA_VERSION)};`);
  }
  if (parts.inbox && upgrade && parts.explicit) {
    const dialect = inboxDialectFor(name, '--dialect');
    const { tablePrefix = 'outbox_', schema } = inboxTableOptions(flags);
    io.out(
      `-- inbox table (@Inbox()): upgrade from version 1 (no fingerprint column; see "schema status") to version ${INBOX_SCHEMA_VERSION}`,
    );
    io.out(`${dialect.addFingerprint(dialect.tableNames(tablePrefix, schema))};`);
  }
  if (parts.inbox && !upgrade) {
    const dialect = inboxDialectFor(name, '--dialect');
    const { tablePrefix = 'outbox_', schema } = inboxTableOptions(flags);
    io.out('-- inbox table (@Inbox())');
    for (const ddl of dialect.createSchema(dialect.tableNames(tablePrefix, schema))) {
      io.out(`${ddl};`);
    }
  }
}

/** The inbox table's schema version, `null` when it does not exist. */
async function inboxVersion(
  dataSource: DataSource | SqlExecutor,
  options: InboxTableOptions,
): Promise<number | null> {
  return new InboxStore(dataSource, options).schemaVersion();
}

async function migrate(
  io: CliIo,
  dataSource: DataSource | SqlExecutor,
  parts: Parts,
  flags: Record<string, string>,
): Promise<number> {
  if (parts.outbox) {
    const tables = outboxTables(flags);
    const before = await outboxSchemaStatus(dataSource, tables);
    await ensureOutboxSchema(dataSource, tables);
    const after = await outboxSchemaStatus(dataSource, tables);
    io.out(
      before.current === null
        ? `outbox tables created (schema version ${after.current})`
        : before.upToDate
          ? `outbox schema version ${before.current}: already up to date`
          : `outbox schema migrated from version ${before.current} to ${after.current}`,
    );
  }
  if (parts.inbox) {
    const options = inboxTableOptions(flags);
    const { plain } = new InboxStore(dataSource, options).names;
    const before = await inboxVersion(dataSource, options);
    await ensureInboxSchema(dataSource, options);
    io.out(
      before === null
        ? `inbox table ${plain} created`
        : before === INBOX_SCHEMA_VERSION
          ? `inbox table ${plain}: already up to date`
          : `inbox table ${plain} upgraded from schema version ${before} to ${INBOX_SCHEMA_VERSION}`,
    );
  }
  return 0;
}

async function status(
  io: CliIo,
  dataSource: DataSource | SqlExecutor,
  parts: Parts,
  flags: Record<string, string>,
): Promise<number> {
  const tables = outboxTables(flags);
  const outbox: OutboxSchemaStatus | null = parts.outbox
    ? await outboxSchemaStatus(dataSource, tables)
    : null;
  const inboxOptions = parts.inbox ? inboxTableOptions(flags) : null;
  const inboxName = inboxOptions ? new InboxStore(dataSource, inboxOptions).names.plain : '';
  // `undefined`: not asked (--outbox); `null`: no table.
  const inbox = inboxOptions ? await inboxVersion(dataSource, inboxOptions) : undefined;

  if (!parts.explicit && outbox?.current === null && inbox === null) {
    io.out(
      `outbox tables (expected version ${outbox.expected}) and inbox table ${inboxName} not found; ` +
        'run: nestjs-outbox schema migrate (add --outbox or --inbox to create only one)',
    );
    return 1;
  }
  let code = 0;
  if (outbox) {
    if (outbox.upToDate) {
      io.out(`outbox schema version ${outbox.current} (expected ${outbox.expected}): up to date`);
    } else if (outbox.current === null && !parts.explicit) {
      // Only the inbox is there: a consumer-only service, which has no outbox to create.
      io.out(
        'outbox tables not found: this database has only the inbox (check them with --outbox)',
      );
    } else {
      code = 1;
      io.out(
        outbox.current === null
          ? `outbox tables not found (expected version ${outbox.expected}); run: nestjs-outbox schema migrate --outbox`
          : `outbox schema version ${outbox.current} is behind ${outbox.expected}; run: nestjs-outbox schema migrate --outbox`,
      );
    }
  }
  if (inbox !== undefined) {
    if (inbox === INBOX_SCHEMA_VERSION) {
      io.out(`inbox table ${inboxName}: up to date`);
    } else if (inbox !== null) {
      code = 1;
      io.out(
        `inbox table ${inboxName} is at schema version ${inbox} (expected ${INBOX_SCHEMA_VERSION}); run: nestjs-outbox schema migrate --inbox`,
      );
    } else if (!parts.explicit) {
      io.out(`inbox table ${inboxName} not found: not used here (check it with --inbox)`);
    } else {
      code = 1;
      io.out(`inbox table ${inboxName} not found; run: nestjs-outbox schema migrate --inbox`);
    }
  }
  return code;
}

/** Runs the CLI; returns the process exit code. */
export async function runCli(
  argv: string[],
  io: CliIo = { out: console.log, err: console.error },
): Promise<number> {
  let args: Args;
  try {
    args = parseArgs(argv);
  } catch (error) {
    io.err(`nestjs-outbox: ${(error as Error).message}\n\n${USAGE}`);
    return 2;
  }
  const { positional, flags, switches } = args;
  const [group, command] = positional;
  if (group !== 'schema' || !command || switches.has('help')) {
    io.err(USAGE);
    return group === undefined || switches.has('help') ? 0 : 2;
  }
  if (command !== 'sql' && command !== 'migrate' && command !== 'status') {
    io.err(USAGE);
    return 2;
  }
  const parts = partsOf(switches);
  const upgrade = switches.has('upgrade');
  if (upgrade && command !== 'sql') {
    io.err(
      `nestjs-outbox: --upgrade is for "schema sql" ("schema migrate" upgrades on its own)\n\n${USAGE}`,
    );
    return 2;
  }
  try {
    if (command === 'sql' && flags.dialect) {
      printSql(io, dialectName(flags.dialect), parts, flags, flags.dialect, upgrade);
      return 0;
    }
    const connection = await openConnection(flags);
    try {
      if (command === 'sql') {
        printSql(io, connection.dialect, parts, flags, await connection.serverVersion(), upgrade);
        return 0;
      }
      return command === 'migrate'
        ? await migrate(io, connection.source, parts, flags)
        : await status(io, connection.source, parts, flags);
    } finally {
      await connection.close();
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
