import {
  CanActivate,
  DynamicModule,
  ExecutionContext,
  INestApplication,
  Injectable,
  Module,
  Type,
} from '@nestjs/common';
import { FastifyAdapter, NestFastifyApplication } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import {
  NonRetryableError,
  OutboxDispatcher,
  OutboxEvent,
  OutboxHandler,
  OutboxModule,
  OutboxService,
  OutboxStore,
  OutboxStoreOptions,
  OUTBOX_STORE,
} from 'nestjs-outbox';
import { OutboxAdminModule } from 'nestjs-outbox';

export const API_KEY = 'test-admin-key';

/** What the handlers do: fail (dead-letter) while `failing`, else record the delivery. */
@Injectable()
export class Behaviour {
  failing = true;
  readonly delivered: string[] = [];

  run(handler: string, event: OutboxEvent<{ n: number }>): void {
    if (this.failing)
      throw new NonRetryableError(`order ${event.payload.n} rejected by ${handler}`);
    this.delivered.push(`${handler}:${event.id}`);
  }
}

@Injectable()
export class Billing {
  constructor(private readonly behaviour: Behaviour) {}
  @OutboxHandler('order.placed')
  onOrder(event: OutboxEvent<{ n: number }>) {
    this.behaviour.run('Billing', event);
  }
}

@Injectable()
export class Shipping {
  constructor(private readonly behaviour: Behaviour) {}
  @OutboxHandler('order.placed')
  onOrder(event: OutboxEvent<{ n: number }>) {
    this.behaviour.run('Shipping', event);
  }
}

@Injectable()
export class Users {
  constructor(private readonly behaviour: Behaviour) {}
  // One attempt: a plain error dead-letters at once, as 'exhausted'.
  @OutboxHandler('user.created', { maxAttempts: 1 })
  onCreated(event: OutboxEvent<{ n: number }>) {
    if (this.behaviour.failing) throw new Error(`user ${event.payload.n} has no mailbox`);
    this.behaviour.run('Users', event);
  }
}

/** Holds the accepted key; a dependency of the guard, so the guard must come through DI. */
@Injectable()
export class ApiKeys {
  readonly accepted = new Set([API_KEY]);
}

@Module({ providers: [ApiKeys], exports: [ApiKeys] })
export class ApiKeysModule {}

@Injectable()
export class ApiKeyGuard implements CanActivate {
  constructor(private readonly keys: ApiKeys) {}
  canActivate(context: ExecutionContext): boolean {
    const key = context.switchToHttp().getRequest<{ headers: Record<string, string> }>().headers[
      'x-api-key'
    ];
    return this.keys.accepted.has(key);
  }
}

export interface AdminApp {
  app: INestApplication;
  http: ReturnType<typeof request>;
  store: OutboxStore;
  outbox: OutboxService;
  dispatcher: OutboxDispatcher;
  behaviour: Behaviour;
  close(): Promise<void>;
}

export interface AdminAppOptions {
  store: OutboxStoreOptions;
  /** Replaces the default `OutboxAdminModule.register({ guards: [ApiKeyGuard], imports: [ApiKeysModule] })`. */
  admin?: DynamicModule | Type;
  imports?: Array<DynamicModule | Type>;
  outboxGlobal?: boolean;
  rawBody?: boolean;
  /** The HTTP platform the app runs on. @default 'express' */
  platform?: AdminPlatform;
  /** More providers (handlers) beside the default ones. */
  providers?: Type[];
  /** The `errorStacks` option of `OutboxModule.forRoot`. */
  errorStacks?: boolean | { lines?: number; maxLength?: number };
}

/** The two HTTP platforms Nest ships; the admin routes and the page must work on both. */
export type AdminPlatform = 'express' | 'fastify';

export async function createAdminApp(options: AdminAppOptions): Promise<AdminApp> {
  const moduleRef = await Test.createTestingModule({
    imports: [
      OutboxModule.forRoot({
        store: options.store,
        isGlobal: options.outboxGlobal,
        dispatcher: { enabled: false, batchSize: 100, concurrency: 100, backoff: { jitter: 0 } },
        ...(options.errorStacks !== undefined ? { errorStacks: options.errorStacks } : {}),
      }),
      options.admin ??
        OutboxAdminModule.register({ guards: [ApiKeyGuard], imports: [ApiKeysModule] }),
      ...(options.imports ?? []),
    ],
    providers: [Behaviour, Billing, Shipping, Users, ...(options.providers ?? [])],
  }).compile();
  const app =
    options.platform === 'fastify'
      ? moduleRef.createNestApplication<NestFastifyApplication>(new FastifyAdapter(), {
          logger: false,
          rawBody: options.rawBody,
        })
      : moduleRef.createNestApplication({ logger: false, rawBody: options.rawBody });
  await app.init();
  // Fastify takes routes until `ready()`; supertest needs the server it serves them from.
  if (options.platform === 'fastify')
    await (app as NestFastifyApplication).getHttpAdapter().getInstance().ready();
  return {
    app,
    http: request(app.getHttpServer()),
    store: app.get<OutboxStore>(OUTBOX_STORE),
    outbox: app.get(OutboxService),
    dispatcher: app.get(OutboxDispatcher),
    behaviour: app.get(Behaviour),
    close: () => app.close(),
  };
}

/**
 * Appends `orders` order.placed events (two handlers each) and `users` user.created events, then
 * drains with failing handlers: 2 × orders + users dead letters.
 */
export async function seed(
  t: AdminApp,
  { orders, users, from = 0 }: { orders: number; users: number; from?: number },
): Promise<OutboxEvent[]> {
  const events = [
    ...Array.from({ length: orders }, (_, i) => ({
      type: 'order.placed',
      key: `k${(from + i) % 3}`,
      payload: { n: from + i },
      headers: { tenant: 't1' },
    })),
    ...Array.from({ length: users }, (_, i) => ({
      type: 'user.created',
      payload: { n: from + i },
    })),
  ];
  const stored = events.length ? await t.outbox.append(events) : [];
  t.behaviour.failing = true;
  await t.dispatcher.drain();
  return stored;
}

/** Every dead letter through the API, for "nothing changed" comparisons. */
export async function snapshot(t: AdminApp): Promise<unknown> {
  const items: unknown[] = [];
  let cursor: string | null = null;
  do {
    const res: request.Response = await t.http
      .get('/outbox/dead-letters')
      .set('x-api-key', API_KEY)
      .query({ limit: 100, ...(cursor ? { cursor } : {}) })
      .expect(200);
    items.push(...res.body.items);
    cursor = res.body.nextCursor;
  } while (cursor);
  const stats = await t.store.stats();
  return { items, stats };
}
