import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host';
import { KafkaContext, MqttContext, NatsContext, RmqContext } from '@nestjs/microservices';
import { headers as natsHeaders } from 'nats';
import { MissingMessageId, resolveMessageId } from '../../lib/inbox/inbox-message-id';

/** An `rpc` execution context as Nest builds it for a microservice handler: [data, transport context]. */
function rpc(data: unknown, transport: object): ExecutionContextHost {
  const context = new ExecutionContextHost([data, transport]);
  context.setType('rpc');
  return context;
}

function nats(entries: Record<string, string>) {
  const headers = natsHeaders();
  for (const [name, value] of Object.entries(entries)) headers.set(name, value);
  return new NatsContext(['orders.placed', headers]);
}

const rmq = (headers: Record<string, unknown>, messageId?: string) =>
  new RmqContext([{ properties: { headers, messageId }, content: Buffer.from('') }, {}, 'p']);

const mqtt = (userProperties?: Record<string, string>) =>
  new MqttContext(['orders/placed', { properties: userProperties ? { userProperties } : {} }]);

const kafka = (headers: Record<string, Buffer>) =>
  new KafkaContext([{ headers, key: null, value: null }, 0, 'orders', {}, {}] as never);

describe('resolveMessageId: a CloudEvent in either content mode', () => {
  const payload = { id: 'business-id', n: 1 };

  it('structured mode: the id attribute of the event in the body', () => {
    const event = { specversion: '1.0', id: 'ev-1', source: '/s', type: 't', data: payload };
    expect(resolveMessageId(rpc(event, nats({})), {})).toBe('ev-1');
  });

  it.each([
    ['NATS ce- headers', () => nats({ 'ce-specversion': '1.0', 'ce-id': 'ev-2' }), 'ev-2'],
    [
      'NATS ce- headers in any case',
      () => nats({ 'Ce-Specversion': '1.0', 'CE-ID': 'ev-3' }),
      'ev-3',
    ],
    [
      'NATS percent-encoded',
      () => nats({ 'ce-specversion': '1.0', 'ce-id': 'a%20b%E2%82%AC' }),
      'a b€',
    ],
    [
      'AMQP cloudEvents_ properties',
      () => rmq({ cloudEvents_specversion: '1.0', cloudEvents_id: 'ev-4' }),
      'ev-4',
    ],
    [
      'AMQP cloudEvents: properties',
      () => rmq({ 'cloudEvents:specversion': '1.0', 'cloudEvents:id': 'ev-5' }),
      'ev-5',
    ],
    ['MQTT 5 user properties', () => mqtt({ specversion: '1.0', id: 'ev-6' }), 'ev-6'],
    [
      'Kafka ce_ headers',
      () => kafka({ ce_specversion: Buffer.from('1.0'), ce_id: Buffer.from('ev-7') }),
      'ev-7',
    ],
  ])('binary mode, %s: the id attribute, not the payload id', (_, transport, id) => {
    expect(resolveMessageId(rpc(payload, transport()), {})).toBe(id);
  });

  it('headers that are not a CloudEvent (no specversion) leave the default: the payload id', () => {
    expect(resolveMessageId(rpc(payload, nats({ 'ce-id': 'x' })), {})).toBe('business-id');
    expect(resolveMessageId(rpc(payload, rmq({ cloudEvents_id: 'x' }, 'amqp-id')), {})).toBe(
      'business-id',
    );
    expect(resolveMessageId(rpc(payload, mqtt({ id: 'x' })), {})).toBe('business-id');
    expect(resolveMessageId(rpc(payload, mqtt()), {})).toBe('business-id');
  });

  it('a binary CloudEvent without an id is refused, naming the attribute', () => {
    const missing = resolveMessageId(rpc(payload, nats({ 'ce-specversion': '1.0' })), {});
    expect(missing).toBeInstanceOf(MissingMessageId);
    expect((missing as MissingMessageId).reason).toContain('CloudEvent attribute "id"');
    const bad = resolveMessageId(
      rpc(payload, nats({ 'ce-specversion': '1.0', 'ce-id': '%C0%A0' })),
      {},
    );
    expect((bad as MissingMessageId).reason).toContain('percent-encoding');
  });

  it('an explicit messageId option still wins', () => {
    const transport = nats({ 'ce-specversion': '1.0', 'ce-id': 'ev-8' });
    expect(resolveMessageId(rpc(payload, transport), { messageId: { path: 'id' } })).toBe(
      'business-id',
    );
  });
});
