/* Removes everything the benchmark may have left behind after an interrupted run. */
import {
  BULL_PREFIX,
  BUSINESS_TABLE,
  deleteRedisKeys,
  dropOutboxTables,
  HANDROLLED_TABLE,
  OUR_REDIS_PREFIX,
  openDataSource,
  RAW_REDIS_PREFIX,
  RAW_TABLE,
  runMain,
  WAKE_REDIS_PREFIX,
  WAKE_TABLE_PREFIX,
} from './common';
import { dropGraphileSchema, dropPgBossSchema } from './baselines';

runMain(async () => {
  const pg = await openDataSource('postgres');
  await dropOutboxTables(pg);
  await dropOutboxTables(pg, WAKE_TABLE_PREFIX);
  await pg.query(`DROP TABLE IF EXISTS ${BUSINESS_TABLE}, ${HANDROLLED_TABLE}, ${RAW_TABLE}`);
  await dropPgBossSchema((q) => pg.query(q));
  await dropGraphileSchema((q) => pg.query(q));
  await pg.destroy();
  const maria = await openDataSource('mariadb');
  await dropOutboxTables(maria);
  await maria.destroy();
  const keys =
    (await deleteRedisKeys(`{${OUR_REDIS_PREFIX}}*`)) +
    (await deleteRedisKeys(`${BULL_PREFIX}:*`)) +
    (await deleteRedisKeys(`{${RAW_REDIS_PREFIX}}*`)) +
    (await deleteRedisKeys(`{${WAKE_REDIS_PREFIX}}*`));
  console.log(
    `clean: bench tables, pg-boss and graphile-worker schemas and ${keys} Redis keys removed`,
  );
});
