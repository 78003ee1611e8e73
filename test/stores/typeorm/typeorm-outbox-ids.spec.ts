import { expect, it } from '@jest/globals';
import { DEFAULT_LIMITS } from '../../../lib/outbox-options';
import { validateEvent } from '../../../lib/outbox-validation';
import { describeWithService } from '../../support/services';
import { SERVICE_OF, TestDialect, useTables } from './typeorm-test-helpers';

const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/**
 * Generated ids (events appended without one, deliveries) are UUID version 7: rows appended later
 * get greater ids, so the id indexes — MySQL / MariaDB's clustered primary key of deliveries
 * among them — grow at their right edge instead of at a random page per insert.
 */
function idsOn(dialect: TestDialect): void {
  const t = useTables(dialect, 'id');

  it('events and deliveries appended one after another have ascending version 7 ids', async () => {
    const make = () => {
      const e = validateEvent({ type: 'id.event', payload: {} }, DEFAULT_LIMITS, 'event');
      e.handlers = ['A.handle', 'B.handle'];
      return e;
    };
    for (let i = 0; i < 20; i++) await t.tables.store.append([make()]);
    await t.tables.store.append(Array.from({ length: 100 }, make));
    const { events: E, deliveries: D } = t.tables.tables;
    const events: { id: string }[] = await t.dataSource.query(
      `SELECT id FROM ${E.text} ORDER BY seq`,
    );
    const deliveries: { id: string }[] = await t.dataSource.query(
      `SELECT id FROM ${D.text} ORDER BY event_seq, handler`,
    );
    expect(events).toHaveLength(120);
    expect(deliveries).toHaveLength(240);
    for (const rows of [events, deliveries]) {
      const ids = rows.map((r) => String(r.id));
      expect(ids.filter((id) => !V7.test(id))).toEqual([]);
      expect(ids.filter((id, i) => i > 0 && id <= ids[i - 1])).toEqual([]);
    }
  });
}

describe('typeorm generated ids [sqlite]', () => idsOn('sqlite'));
describeWithService(SERVICE_OF.postgres, 'typeorm generated ids', () => idsOn('postgres'));
describeWithService(SERVICE_OF.mariadb, 'typeorm generated ids', () => idsOn('mariadb'));
