// README "Without TypeORM: Kysely", the MySQL/MariaDB snippet, verbatim: compiled with the tests.
import { Injectable, Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Kysely, MysqlDialect } from 'kysely';
import { createPool } from 'mysql2';
import { kyselyExecutor, OutboxModule, OutboxService } from 'nestjs-outbox';

const pool = createPool({ uri: process.env.DATABASE_URL });
const db = new Kysely<any>({ dialect: new MysqlDialect({ pool }) });

@Injectable()
export class Orders {
  constructor(private readonly outbox: OutboxService) {}

  place(orderId: string): Promise<void> {
    return db.transaction().execute(async (trx) => {
      await trx.insertInto('orders').values({ id: orderId }).execute();
      await this.outbox.append(
        { type: 'order.placed', key: orderId, payload: { orderId } },
        { tx: trx },
      );
    });
  }
}

@Module({
  imports: [
    ScheduleModule.forRoot(),
    OutboxModule.forRoot({ store: { type: 'sql', executor: kyselyExecutor(db, { pool }) } }),
  ],
  providers: [Orders],
})
export class AppModule {}
