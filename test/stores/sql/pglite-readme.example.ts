// README "Testing your app without a database server (PGlite)", verbatim: compiled with the tests.
import { PGlite } from '@electric-sql/pglite';
import { Inject, Injectable } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { OutboxDispatcher, OutboxModule, OutboxService, pgliteExecutor } from 'nestjs-outbox';

const PGLITE = Symbol('PGLITE');

@Injectable()
export class Orders {
  constructor(
    @Inject(PGLITE) private readonly pg: PGlite,
    private readonly outbox: OutboxService,
  ) {}

  place(orderId: string): Promise<void> {
    return this.pg.transaction(async (tx) => {
      await tx.query('INSERT INTO orders (id) VALUES ($1)', [orderId]);
      await this.outbox.append(
        { type: 'order.placed', key: orderId, payload: { orderId } },
        { tx },
      );
    });
  }
}

export async function example(): Promise<void> {
  const pg = await PGlite.create(); // initdb in WASM: seconds, so once per test file
  await pg.exec('CREATE TABLE orders (id text PRIMARY KEY)');
  const moduleRef = await Test.createTestingModule({
    imports: [
      ScheduleModule.forRoot(),
      OutboxModule.forRoot({
        store: { type: 'sql', executor: pgliteExecutor(pg), ensureSchema: true },
      }),
    ],
    providers: [{ provide: PGLITE, useValue: pg }, Orders],
  }).compile();
  const app = await moduleRef.createNestApplication().init();
  await app.get(Orders).place('o-1');
  await app.get(OutboxDispatcher).drain();
  await app.close();
  await pg.close();
}
