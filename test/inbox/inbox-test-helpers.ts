import { randomBytes } from 'node:crypto';
import { DataSource, DataSourceOptions } from 'typeorm';
import { SERVICES } from '../support/services';

export type InboxTestDialect = 'postgres' | 'mariadb' | 'sqlite';

export function inboxDataSourceOptions(dialect: InboxTestDialect): DataSourceOptions {
  switch (dialect) {
    case 'postgres':
      return {
        type: 'postgres',
        host: SERVICES.postgres.host,
        port: SERVICES.postgres.port,
        username: process.env.PGUSER ?? 'postgres',
        password: process.env.PGPASSWORD,
        database: process.env.PGDATABASE ?? 'test',
        // Room for 20 concurrent inbox transactions plus the test's own queries.
        extra: { max: 30 },
      };
    case 'mariadb':
      return {
        type: 'mariadb',
        host: SERVICES.mariadb.host,
        port: SERVICES.mariadb.port,
        username: process.env.MYSQL_USER ?? 'root',
        password: process.env.MYSQL_PASSWORD ?? '',
        database: process.env.MYSQL_DATABASE ?? 'test',
        extra: { connectionLimit: 30 },
      };
    case 'sqlite':
      return { type: 'better-sqlite3', database: ':memory:' };
  }
}

export function openInboxDataSource(dialect: InboxTestDialect): Promise<DataSource> {
  return new DataSource(inboxDataSourceOptions(dialect)).initialize();
}

/** A table prefix no other run uses, so test files may share one database server. */
export function uniquePrefix(tag: string): string {
  return `ib_${tag}_${randomBytes(3).toString('hex')}_`;
}

function quote(dataSource: DataSource, name: string): string {
  return dataSource.options.type === 'mariadb' ? `\`${name}\`` : `"${name}"`;
}

/** A table where consumers record their effect: one row per application of a message. */
export async function createEffectTable(dataSource: DataSource, name: string) {
  const table = quote(dataSource, name);
  await dataSource.query(
    `CREATE TABLE ${table} (message_id VARCHAR(255) NOT NULL, note VARCHAR(255) NOT NULL)`,
  );
  const p = (i: number) => (dataSource.options.type === 'postgres' ? `$${i}` : '?');
  return {
    table,
    /** SQL inserting one effect row; params: messageId, note. */
    insertSql: `INSERT INTO ${table} (message_id, note) VALUES (${p(1)}, ${p(2)})`,
    async count(messageId?: string): Promise<number> {
      const rows: { n: number | string }[] = messageId
        ? await dataSource.query(`SELECT COUNT(*) AS n FROM ${table} WHERE message_id = ${p(1)}`, [
            messageId,
          ])
        : await dataSource.query(`SELECT COUNT(*) AS n FROM ${table}`);
      return Number(rows[0].n);
    },
    drop: () => dataSource.query(`DROP TABLE IF EXISTS ${table}`),
  };
}

/** Reads the inbox table directly. */
export function inboxTable(dataSource: DataSource, prefix: string) {
  const table = quote(dataSource, `${prefix}inbox`);
  const p = (i: number) => (dataSource.options.type === 'postgres' ? `$${i}` : '?');
  return {
    table,
    async count(consumer?: string, messageId?: string): Promise<number> {
      const where = consumer ? ` WHERE consumer = ${p(1)} AND message_id = ${p(2)}` : '';
      const rows: { n: number | string }[] = await dataSource.query(
        `SELECT COUNT(*) AS n FROM ${table}${where}`,
        consumer ? [consumer, messageId] : [],
      );
      return Number(rows[0].n);
    },
    drop: () => dataSource.query(`DROP TABLE IF EXISTS ${table}`),
  };
}
