import { Module } from '@nestjs/common';
import { TypeOrmModule, getDataSourceToken } from '@nestjs/typeorm';
import { InboxModule } from 'nestjs-outbox';
import { PlayerCard } from './player-card.entity';
import { PlayerEventsController } from './player-events.controller';

export const CONSUMER_DATABASE = process.env.SAMPLE_CONSUMER_DB ?? 'data/consumer.sqlite';
/** Its own name, so the consumer can also run inside one process with the producer (the tests). */
export const CONSUMER_CONNECTION = 'consumer';

/** A second service with its own database: its inbox table lives next to its read model. */
@Module({
  imports: [
    TypeOrmModule.forRoot({
      name: CONSUMER_CONNECTION,
      type: 'better-sqlite3',
      database: CONSUMER_DATABASE,
      enableWAL: CONSUMER_DATABASE !== ':memory:',
      entities: [PlayerCard],
      synchronize: true,
    }),
    InboxModule.forRoot({
      dataSourceToken: getDataSourceToken(CONSUMER_CONNECTION),
      ensureSchema: true,
    }),
  ],
  controllers: [PlayerEventsController],
})
export class ConsumerModule {}
