import { EntitySchema, MikroORM } from '@mikro-orm/core';
import { MariaDbDriver } from '@mikro-orm/mariadb';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import { mikroOrmExecutor } from '../../../lib/executors';
import { createDialect } from '../../../lib/stores/typeorm/dialects';
import { ensureOutboxSchema, SqlOutboxStore } from '../../../lib/stores/typeorm/internal';
import { SERVICES } from '../../support/services';
import { mysqlConnectionOptions } from './mysql2-test-helpers';

/** The business row the tests write beside the event. */
export class Order {
  constructor(public id: string) {}
}

/** `Order` mapped to `<prefix>orders` (an EntitySchema: no decorators needed). */
export function orderSchema(prefix: string): EntitySchema<Order> {
  return new EntitySchema<Order>({
    class: Order,
    tableName: `${prefix}orders`,
    properties: { id: { type: 'string', primary: true } },
  });
}

/** A MikroORM 6 on the test PostgreSQL, with `Order` on `<prefix>orders` (table created). */
export async function openOrm(prefix: string, poolMax = 10): Promise<MikroORM<PostgreSqlDriver>> {
  const orm = await MikroORM.init<PostgreSqlDriver>({
    driver: PostgreSqlDriver,
    host: SERVICES.postgres.host,
    port: SERVICES.postgres.port,
    user: process.env.PGUSER ?? 'postgres',
    password: process.env.PGPASSWORD,
    dbName: process.env.PGDATABASE ?? 'test',
    entities: [orderSchema(prefix)],
    pool: { min: 0, max: poolMax },
    debug: false,
    allowGlobalContext: true,
  });
  await orm.em
    .getConnection()
    .execute(`CREATE TABLE IF NOT EXISTS ${prefix}orders (id text PRIMARY KEY)`);
  return orm;
}

/** A MikroORM 6 on the test MariaDB (`@mikro-orm/mariadb`), with `Order` on `<prefix>orders`. */
export async function openMariaOrm(prefix: string, poolMax = 10): Promise<MikroORM<MariaDbDriver>> {
  const { host, port, user, password, database } = mysqlConnectionOptions;
  const orm = await MikroORM.init<MariaDbDriver>({
    driver: MariaDbDriver,
    host,
    port,
    user,
    password,
    dbName: database,
    entities: [orderSchema(prefix)],
    pool: { min: 0, max: poolMax },
    debug: false,
    allowGlobalContext: true,
  });
  await orm.em
    .getConnection()
    .execute(`CREATE TABLE IF NOT EXISTS ${prefix}orders (id varchar(64) PRIMARY KEY)`);
  return orm;
}

/** Creates the outbox tables for `prefix` through the MikroORM executor; a store and helpers. */
export async function mikroStoreFor(orm: MikroORM, prefix: string) {
  const executor = mikroOrmExecutor(orm);
  await ensureOutboxSchema(executor, { tablePrefix: prefix });
  const store = new SqlOutboxStore(executor, { tablePrefix: prefix });
  const { tables } = createDialect(executor, { tablePrefix: prefix });
  const run = (text: string) => executor.query({ text, params: [] });
  return {
    executor,
    store,
    tables,
    async empty(): Promise<void> {
      await run(`DELETE FROM ${tables.deliveries.text}`);
      await run(`DELETE FROM ${tables.deadLetters.text}`);
      await run(`DELETE FROM ${tables.events.text}`);
    },
    async drop(): Promise<void> {
      for (const ddl of createDialect(executor, { tablePrefix: prefix }).dropSchema())
        await run(ddl);
      await run(`DROP TABLE IF EXISTS ${prefix}orders`);
    },
  };
}
