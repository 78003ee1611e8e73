import { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { OutboxDispatcher } from 'nestjs-outbox';

process.env.SAMPLE_DB = ':memory:';
const { AppModule } =
  require('../../sample-app/app.module') as typeof import('../../sample-app/app.module');
const { WelcomeHandler } =
  require('../../sample-app/players/welcome.handler') as typeof import('../../sample-app/players/welcome.handler');

describe('sample app', () => {
  let app: INestApplication;

  beforeAll(async () => {
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
  });
  afterAll(() => app.close());

  it('creates a player and delivers player.created once', async () => {
    const res = await request(app.getHttpServer())
      .post('/players')
      .send({ name: 'ada' })
      .expect(201);
    expect(res.body).toMatchObject({ name: 'ada' });
    await app.get(OutboxDispatcher).drain();
    expect(app.get(WelcomeHandler).welcomed).toEqual(['ada']);
    await request(app.getHttpServer()).post('/players').send({ name: 'ada' }).expect(409);
    await request(app.getHttpServer()).post('/players').send({}).expect(400);
    const stats = await request(app.getHttpServer()).get('/outbox-stats').expect(200);
    expect(stats.body.store).toMatchObject({ pending: 0, dead: 0 });
  });

  it('adds points once per Idempotency-Key and emits player.scored in the same transaction', async () => {
    const http = request(app.getHttpServer());
    const player = (await http.post('/players').send({ name: 'grace' }).expect(201)).body;
    const key = '5b0f8c2e-4a57-4c1e-9d7b-6f0e1f3a2b4c';
    const first = await request(app.getHttpServer())
      .post(`/players/${player.id}/points`)
      .set('Idempotency-Key', key)
      .send({ points: 5 })
      .expect(201);
    expect(first.body).toEqual({ status: 'added', score: 5 });
    const again = await request(app.getHttpServer())
      .post(`/players/${player.id}/points`)
      .set('Idempotency-Key', key)
      .send({ points: 5 })
      .expect(201);
    expect(again.body).toEqual({ status: 'duplicate' });
    await request(app.getHttpServer())
      .post(`/players/${player.id}/points`)
      .send({ points: 5 })
      .expect(400);
    const players = (await request(app.getHttpServer()).get('/players').expect(200)).body;
    expect(players.find((p: { id: string }) => p.id === player.id).score).toBe(5);
    await app.get(OutboxDispatcher).drain();
    const stats = await request(app.getHttpServer())
      .get('/outbox/stats')
      .set('x-admin-key', 'sample-admin-key')
      .expect(200);
    expect(stats.body).toMatchObject({ pending: 0, dead: 0 });
    await request(app.getHttpServer()).get('/outbox/stats').expect(403);
  });
});
