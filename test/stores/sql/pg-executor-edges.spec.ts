import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Body, Controller, INestApplication, Injectable, Module, Post } from '@nestjs/common';
import { ClsPluginTransactional, Transactional, TransactionHost } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { Test } from '@nestjs/testing';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { ClsModule } from 'nestjs-cls';
import { Client, Pool } from 'pg';
import request from 'supertest';
import {
  Inbox,
  OutboxModule,
  OutboxService,
  OutboxValidationError,
  pgExecutor,
} from 'nestjs-outbox';
import { TS_REGISTER } from '../../support/child-process';
import { describeWithService, SERVICES } from '../../support/services';
import { dataSourceOptions, openDataSource, uniquePrefix } from '../typeorm/typeorm-test-helpers';
import { openPool, pgStoreFor } from './pg-test-helpers';

describe('pgExecutor without pg installed', () => {
  it('names the package to install', () => {
    const script = `
      const Module = require('node:module');
      const resolveFilename = Module._resolveFilename;
      Module._resolveFilename = function (request, ...rest) {
        if (request === 'pg' || request.startsWith('pg/')) {
          throw Object.assign(new Error("Cannot find module '" + request + "'"), { code: 'MODULE_NOT_FOUND' });
        }
        return resolveFilename.call(this, request, ...rest);
      };
      require('reflect-metadata');
      const { pgExecutor } = require('./lib/index.ts');
      try { pgExecutor({}); console.log('no error'); } catch (e) { console.log(e.name + ': ' + e.message); }
    `;
    const out = execFileSync(process.execPath, ['-r', TS_REGISTER, '-e', script], {
      cwd: resolve(__dirname, '..', '..', '..'),
      encoding: 'utf8',
      env: { ...process.env, TS_NODE_PROJECT: 'tsconfig.json' },
    });
    expect(out.trim().split('\n').pop()).toMatch(
      /MissingDependencyError: .*pgExecutor.*"pg".*npm install pg/,
    );
  });
});

describeWithService('postgres', 'sql store through pgExecutor: edges', () => {
  describe('ambient TypeORM transactions are not its client’s: refused', () => {
    const prefix = uniquePrefix('pga');
    let pool: Pool;
    let app: INestApplication;

    @Injectable()
    class Checkout {
      constructor(
        private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
        private readonly outbox: OutboxService,
      ) {}

      @Transactional()
      async place(id: string): Promise<void> {
        await this.txHost.tx.query('SELECT 1');
        await this.outbox.append({ type: 'order.placed', key: id, payload: { id } });
      }
    }

    @Controller('consume')
    class Consumer {
      readonly errors: unknown[] = [];
      constructor(private readonly outbox: OutboxService) {}

      @Post()
      @Inbox()
      async consume(@Body() body: { id: string }): Promise<void> {
        try {
          await this.outbox.append({ type: 'order.placed', key: body.id, payload: body });
        } catch (error) {
          this.errors.push(error);
          throw error;
        }
      }
    }

    beforeAll(async () => {
      pool = openPool();
      const inboxSource = await openDataSource('sqlite');
      @Module({
        imports: [
          TypeOrmModule.forRoot(dataSourceOptions('sqlite')),
          ClsModule.forRoot({
            global: true,
            plugins: [
              new ClsPluginTransactional({
                imports: [TypeOrmModule],
                adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: getDataSourceToken() }),
              }),
            ],
          }),
          OutboxModule.forRoot({
            store: { type: 'sql', executor: pgExecutor(pool), tablePrefix: prefix },
            dispatcher: { enabled: false },
            inbox: { dataSource: inboxSource, cleanupIntervalMs: 0 },
          }),
        ],
        controllers: [Consumer],
        providers: [Checkout],
      })
      class AmbientApp {}
      const moduleRef = await Test.createTestingModule({ imports: [AmbientApp] }).compile();
      app = moduleRef.createNestApplication({ logger: false });
      await app.init();
    });

    afterAll(async () => {
      await app?.close();
      await (await pgStoreFor(pool, prefix)).drop();
      await pool?.end();
    });

    const events = async () =>
      Number((await pool.query(`SELECT count(*) AS n FROM ${prefix}events`)).rows[0].n);

    it('@Transactional() of the TypeORM adapter', async () => {
      const error = await app
        .get(Checkout)
        .place('cls')
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect((error as OutboxValidationError).field).toBe('options.tx');
      expect((error as Error).message).toMatch(
        /@Transactional\(\) transaction.*TypeORM EntityManager/s,
      );
      expect(await events()).toBe(0);
    });

    it('@Inbox()', async () => {
      const res = await request(app.getHttpServer())
        .post('/consume')
        .set('Idempotency-Key', 'k1')
        .send({ id: 'inbox' });
      expect(res.status).toBeGreaterThanOrEqual(400);
      const [error] = app.get(Consumer).errors;
      expect((error as OutboxValidationError).field).toBe('options.tx');
      expect((error as Error).message).toMatch(/@Inbox\(\) transaction/);
      expect(await events()).toBe(0);
    });
  });

  it('appends without tx NOTIFY other processes after their own commit', async () => {
    const pool = openPool();
    const tables = await pgStoreFor(pool, uniquePrefix('pgn'));
    const listener = new Client({
      host: SERVICES.postgres.host,
      port: SERVICES.postgres.port,
      user: process.env.PGUSER ?? 'postgres',
      password: process.env.PGPASSWORD,
      database: process.env.PGDATABASE ?? 'test',
    });
    try {
      const { store } = tables;
      const channel = (await store.resolveWakeupChannel())!;
      const { wakeupListenerLock } =
        await import('../../../lib/stores/typeorm/dialects/postgres/wakeups');
      await listener.connect();
      const heard: string[] = [];
      listener.on('notification', (m) => heard.push(m.channel));
      await listener.query(`LISTEN "${channel}"`);
      // What a listening process holds, so producers know someone listens.
      await listener.query('SELECT pg_advisory_lock_shared($1, $2)', wakeupListenerLock(channel));
      store.publishWakeups();
      await store.append([
        {
          id: '0190a0a0-0000-7000-8000-000000000001',
          type: 't',
          key: null,
          payload: {},
          headers: {},
          occurredAt: new Date(),
          availableAt: null,
          handlers: ['A.handle'],
        },
      ]);
      const end = Date.now() + 5_000;
      while (heard.length === 0 && Date.now() < end) {
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(heard).toContain(channel);
      await store.close();
    } finally {
      await listener.end();
      await tables.drop();
      await pool.end();
    }
  });
});
