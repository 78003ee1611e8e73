import { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { OutboxDispatcher } from 'nestjs-outbox';

process.env.SAMPLE_DB = ':memory:';
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { AppModule } =
  require('../../sample-app/app.module') as typeof import('../../sample-app/app.module');
// eslint-disable-next-line @typescript-eslint/no-require-imports
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
});
