import { DataSource, DataSourceOptions } from 'typeorm';
import { dataSourceOptions } from '../stores/typeorm/typeorm-test-helpers';

export { uniquePrefix } from '../stores/typeorm/typeorm-test-helpers';

export type InboxTestDialect = 'postgres' | 'mariadb' | 'sqlite';

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
