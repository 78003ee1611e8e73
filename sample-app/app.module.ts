import { Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { OutboxAdminModule, OutboxModule } from 'nestjs-outbox';
import { AdminKeyGuard } from './admin-key.guard';
import { PointsController } from './players/points.controller';
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
      // WAL: without it every outbox claim and ack syncs the whole journal to disk.
      enableWAL: SAMPLE_DATABASE !== ':memory:',
      entities: [Player],
      synchronize: true,
    }),
    // The outbox lives in the same SQLite file as the players, so a player and its event commit
    // together; its tables are created at start (ensureSchema).
    OutboxModule.forRoot({
      store: { type: 'typeorm', dataSourceToken: getDataSourceToken(), ensureSchema: true },
      dispatcher: { pollInterval: 200 },
    }),
    // Dead letters and stats at /outbox/..., and the dashboard page at /outbox/ui, behind an API
    // key (header x-admin-key).
    OutboxAdminModule.register({ guards: [AdminKeyGuard], ui: true }),
  ],
  controllers: [PlayersController, PointsController],
  providers: [PlayersService, WelcomeHandler],
})
export class AppModule {}
