import { Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { TypeOrmModule } from '@nestjs/typeorm';
import { OutboxModule } from 'nestjs-outbox';
import { Player } from './players/player.entity';
import { PlayersController } from './players/players.controller';
import { PlayersService } from './players/players.service';
import { WelcomeHandler } from './players/welcome.handler';

export const SAMPLE_DATABASE = process.env.SAMPLE_DB ?? 'data/sample.sqlite';

@Module({
  imports: [
    ScheduleModule.forRoot(),
    TypeOrmModule.forRoot({
      type: 'better-sqlite3',
      database: SAMPLE_DATABASE,
      entities: [Player],
      synchronize: true,
    }),
    OutboxModule.forRoot({ store: { type: 'memory' }, dispatcher: { pollInterval: 200 } }),
  ],
  controllers: [PlayersController],
  providers: [PlayersService, WelcomeHandler],
})
export class AppModule {}
