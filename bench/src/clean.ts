/* Removes everything the benchmark may have left behind after an interrupted run. */
import {
  BULL_PREFIX,
  BUSINESS_TABLE,
  deleteRedisKeys,
  dropOutboxTables,
  HANDROLLED_TABLE,
  OUR_REDIS_PREFIX,
  openDataSource,
  runMain,
} from './common';
import { dropPgBossSchema } from './baselines';

runMain(async () => {
  const pg = await openDataSource('postgres');
  await dropOutboxTables(pg);
  await pg.query(`DROP TABLE IF EXISTS ${BUSINESS_TABLE}, ${HANDROLLED_TABLE}`);
  await dropPgBossSchema((q) => pg.query(q));
  await pg.destroy();
  const maria = await openDataSource('mariadb');
  await dropOutboxTables(maria);
  await maria.destroy();
  const keys =
    (await deleteRedisKeys(`{${OUR_REDIS_PREFIX}}*`)) + (await deleteRedisKeys(`${BULL_PREFIX}:*`));
  console.log(`clean: bench tables, pg-boss schema and ${keys} Redis keys removed`);
});
