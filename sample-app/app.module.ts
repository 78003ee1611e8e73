import { Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { OutboxAdminModule, OutboxModule } from 'nestjs-outbox';
import { AdminGuard } from './admin/admin.guard';
import { AdminSignInModule } from './admin/admin-sign-in.module';
import { SampleRelayModule } from './relay/sample-relay.module';
import { PointsController } from './players/points.controller';
import { Player } from './players/player.entity';
import { PlayersController } from './players/players.controller';
import { PlayersService } from './players/players.service';
import { WelcomeHandler } from './players/welcome.handler';

export const SAMPLE_DATABASE = process.env.SAMPLE_DB ?? 'data/sample.sqlite';

@Module({
  imports: [
    ScheduleModule.forRoot(),
    // Off unless SAMPLE_BROKER=rabbitmq|nats: relays player events to the consumer process.
    SampleRelayModule.fromEnv(),
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
    // key (header x-admin-key) or the session cookie of the sign-in form at /admin/sign-in.
    AdminSignInModule,
    OutboxAdminModule.register({ guards: [AdminGuard], imports: [AdminSignInModule], ui: true }),
  ],
  controllers: [PlayersController, PointsController],
  providers: [PlayersService, WelcomeHandler],
})
export class AppModule {}
