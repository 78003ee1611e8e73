/*
 * A small NestJS 12 application on the library (run by test/fit/nest12.spec.ts in a child
 * process, with nest12-resolve.js preloaded): the TypeORM store on SQLite through
 * @nestjs/typeorm 12, the dispatcher on @nestjs/schedule 12, @Inbox() over HTTP
 * (@nestjs/platform-express 12) and over a TCP microservice (@nestjs/microservices 12), the admin
 * routes, the health indicator (@nestjs/terminus 12) and the event stream through
 * @nestjs/event-emitter 12. It prints one JSON line of what it observed and exits.
 */
import 'reflect-metadata';
import { join, sep } from 'node:path';
import {
  Body,
  CanActivate,
  Controller,
  ExecutionContext,
  Get,
  Injectable,
  Module,
  Post,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventEmitterModule, OnEvent } from '@nestjs/event-emitter';
import {
  ClientProxy,
  ClientProxyFactory,
  MessagePattern,
  Payload,
  Transport,
} from '@nestjs/microservices';
import { ScheduleModule } from '@nestjs/schedule';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { firstValueFrom } from 'rxjs';
import { DataSource, EntityManager } from 'typeorm';
import {
  Inbox,
  InboxManager,
  OutboxAdminModule,
  OutboxHandler,
  OutboxHealthIndicator,
  OutboxModule,
  OutboxService,
} from '../../../lib';
import type { OutboxEvent } from '../../../lib';

const ROOT_NEST = join(__dirname, '..', '..', '..', 'node_modules', '@nestjs') + sep;
const handled: unknown[] = [];
const streamed: string[] = [];

@Injectable()
class Projections {
  private failedOnce = false;

  @OutboxHandler('order.placed', { backoff: { initialMs: 10 } })
  onPlaced(event: OutboxEvent<{ n: number }>): void {
    // The first attempt of event 3 fails: the retry path runs on NestJS 12 too.
    if (event.payload.n === 3 && !this.failedOnce) {
      this.failedOnce = true;
      throw new Error('first attempt fails');
    }
    handled.push(event.payload.n);
  }

  @OnEvent('outbox.delivered')
  onDelivered(e: { type: string }): void {
    streamed.push(`delivered:${e.type}`);
  }
}

@Controller('payments')
class PaymentsController {
  @Post()
  @Inbox({ duplicateResult: { status: 'duplicate' } })
  async capture(
    @Body() body: { orderId: string },
    @InboxManager() manager: EntityManager,
  ): Promise<{ status: string }> {
    await manager.query('INSERT INTO payments (order_id) VALUES (?)', [body.orderId]);
    return { status: 'captured' };
  }
}

@Controller()
class ShippingConsumer {
  @MessagePattern('order.paid')
  @Inbox({ consumer: 'shipping', duplicateResult: { status: 'duplicate' } })
  async onOrderPaid(
    @Payload() order: { id: string },
    @InboxManager() manager: EntityManager,
  ): Promise<{ status: string }> {
    await manager.query('INSERT INTO shipments (order_id) VALUES (?)', [order.id]);
    return { status: 'scheduled' };
  }
}

@Injectable()
class AdminKeyGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    return context.switchToHttp().getRequest().headers['x-admin-key'] === 'secret';
  }
}

@Controller('health')
class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly outbox: OutboxHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.outbox.isHealthy('outbox')]);
  }
}

@Module({
  imports: [
    ScheduleModule.forRoot(),
    EventEmitterModule.forRoot(),
    TerminusModule,
    TypeOrmModule.forRoot({ type: 'better-sqlite3', database: ':memory:' }),
    OutboxModule.forRoot({
      store: { type: 'typeorm', dataSourceToken: getDataSourceToken() },
      dispatcher: { pollInterval: 50 },
    }),
    OutboxAdminModule.register({ guards: [AdminKeyGuard] }),
  ],
  controllers: [PaymentsController, ShippingConsumer, HealthController],
  providers: [Projections],
})
class AppModule {}

async function waitFor(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 200 && !check(); i++) await new Promise((r) => setTimeout(r, 25));
  if (!check()) throw new Error(`timed out waiting for ${what}`);
}

async function main(): Promise<void> {
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  const app = await NestFactory.create(AppModule, { logger: ['error'] });
  app.connectMicroservice({ transport: Transport.TCP, options: { host: '127.0.0.1', port } });
  await app.startAllMicroservices();
  await app.listen(0, '127.0.0.1');
  const base = await app.getUrl();
  const ds = app.get<DataSource>(getDataSourceToken());
  await ds.query('CREATE TABLE payments (order_id TEXT NOT NULL)');
  await ds.query('CREATE TABLE shipments (order_id TEXT NOT NULL)');
  const outbox = app.get(OutboxService);

  // Append in the caller's transaction: committed events are delivered, rolled-back ones never.
  await ds.transaction((manager) =>
    outbox.append(
      [1, 2, 3].map((n) => ({ type: 'order.placed', payload: { n } })),
      { manager },
    ),
  );
  await ds
    .transaction(async (manager) => {
      await outbox.append({ type: 'order.placed', payload: { n: 99 } }, { manager });
      throw new Error('rolled back');
    })
    .catch(() => undefined);
  await waitFor(() => handled.length >= 3, 'three deliveries');

  // @Inbox() over HTTP: the same Idempotency-Key twice has one effect.
  const pay = () =>
    fetch(`${base}/payments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': 'pay-1' },
      body: JSON.stringify({ orderId: 'o-1' }),
    }).then(async (r) => ({ status: r.status, body: await r.json() }));
  const http = [await pay(), await pay()];

  // @Inbox() over a TCP microservice: the same message id twice has one effect.
  const client: ClientProxy = ClientProxyFactory.create({
    transport: Transport.TCP,
    options: { host: '127.0.0.1', port },
  });
  const ship = () => firstValueFrom(client.send('order.paid', { id: 'm-1' }));
  const rpc = [await ship(), await ship()];
  client.close();

  const [{ payments }] = await ds.query('SELECT count(*) AS payments FROM payments');
  const [{ shipments }] = await ds.query('SELECT count(*) AS shipments FROM shipments');
  const stats = [
    await fetch(`${base}/outbox/stats`).then((r) => r.status),
    await fetch(`${base}/outbox/stats`, { headers: { 'x-admin-key': 'secret' } }).then(
      (r) => r.status,
    ),
  ];
  const health = (await fetch(`${base}/health`).then((r) => r.json())) as { status: string };
  await new Promise((r) => setTimeout(r, 300)); // a rolled-back event would have been claimed by now
  await app.close();
  console.log(
    JSON.stringify({
      nest: require('@nestjs/core/package.json').version,
      // The root's NestJS 11 (CommonJS) would be in require.cache had anything loaded it.
      nest11Loaded: Object.keys(require.cache).filter((file) => file.startsWith(ROOT_NEST)),
      handled: [...handled].sort(),
      streamed: streamed.length,
      http,
      rpc,
      payments: Number(payments),
      shipments: Number(shipments),
      stats,
      health: health.status,
    }),
  );
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
