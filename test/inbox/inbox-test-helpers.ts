import { DataSource, DataSourceOptions } from 'typeorm';
import { dataSourceOptions } from '../stores/typeorm/typeorm-test-helpers';

export { uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';

export type InboxTestDialect = 'postgres' | 'mariadb' | 'sqlite';

/** The inbox table as version 1 (before the fingerprint column) created it: frozen DDL. */
export const INBOX_VERSION_1: Record<InboxTestDialect, (table: string) => string> = {
  postgres: (t) => `CREATE TABLE ${t} (
    consumer varchar(255) NOT NULL, message_id varchar(255) NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer, message_id))`,
  mariadb: (t) => `CREATE TABLE ${t} (
    consumer VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    message_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    processed_at DATETIME(3) NOT NULL, PRIMARY KEY (consumer, message_id)) ENGINE=InnoDB`,
  sqlite: (t) => `CREATE TABLE ${t} (
    consumer TEXT NOT NULL, message_id TEXT NOT NULL, processed_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, message_id))`,
};

/** Room for 20 concurrent inbox transactions plus the test's own queries. */
const POOL: Record<InboxTestDialect, Record<string, unknown>> = {
  postgres: { max: 30 },
  mariadb: { connectionLimit: 30 },
  sqlite: {},
};

export function inboxDataSourceOptions(dialect: InboxTestDialect): DataSourceOptions {
  return dataSourceOptions(dialect, POOL[dialect]);
}

export function openInboxDataSource(dialect: InboxTestDialect): Promise<DataSource> {
  return new DataSource(inboxDataSourceOptions(dialect)).initialize();
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
