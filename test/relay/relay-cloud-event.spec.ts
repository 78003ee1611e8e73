import { CloudEventsDeserializer } from 'nestjs-outbox';
import { natsHeaderValue, uriReferenceFault } from '../../lib/relay/relay-cloud-event';

describe('CloudEvents framing', () => {
  it("percent-encodes NATS header values as the binding's example does", () => {
    expect(natsHeaderValue('Euro \u20ac \u{1f600}')).toBe('Euro%20%E2%82%AC%20%F0%9F%98%80');
    expect(natsHeaderValue('say "100%"')).toBe('say%20%22100%25%22');
    expect(natsHeaderValue('00-abc-01')).toBe('00-abc-01');
    expect(decodeURIComponent(natsHeaderValue('Grüße \u{1f600} "x" 5%'))).toBe(
      'Grüße \u{1f600} "x" 5%',
    );
  });

  it.each([
    ['/orders-service', undefined],
    ['urn:example:orders', undefined],
    ['https://example.com/orders?x=1#a', undefined],
    ['/caf%C3%A9', undefined],
    ['orders service', 'characters'],
    ['/café', 'characters'],
    ['/100%', '"%"'],
  ])('source %j as a URI-reference: %s', (source, fault) => {
    const found = uriReferenceFault(source);
    if (fault === undefined) expect(found).toBeUndefined();
    else expect(found).toContain(fault);
  });
});

describe('CloudEventsDeserializer', () => {
  const deserializer = new CloudEventsDeserializer();
  const event = {
    specversion: '1.0',
    id: 'e1',
    source: '/s',
    type: 'order.placed',
    data: { n: 1 },
  };

  it('NATS (bytes, subject as channel): the body is the payload, the subject the pattern', () => {
    const bytes = new TextEncoder().encode(JSON.stringify(event));
    expect(deserializer.deserialize(bytes, { channel: 'orders.>' })).toEqual({
      pattern: 'orders.>',
      data: event,
    });
    expect(deserializer.deserialize(new TextEncoder().encode('plain'), { channel: 'c' })).toEqual({
      pattern: 'c',
      data: 'plain',
    });
  });

  it('RabbitMQ (message properties as options): the pattern is the type, from the body or the cloudEvents_ / cloudEvents: properties', () => {
    expect(
      deserializer.deserialize(event, { contentType: 'application/cloudevents+json' }),
    ).toEqual({
      pattern: 'order.placed',
      data: event,
    });
    for (const separator of ['_', ':']) {
      const headers = {
        [`cloudEvents${separator}specversion`]: '1.0',
        [`cloudEvents${separator}type`]: 'order.shipped',
      };
      expect(deserializer.deserialize({ n: 2, data: 'own field' }, { headers })).toEqual({
        pattern: 'order.shipped',
        data: { n: 2, data: 'own field' },
      });
    }
  });

  it("a message that is no CloudEvent reads as Nest's default deserializer reads it", () => {
    const packet = { pattern: 'order.placed', data: { id: 'x' } };
    expect(deserializer.deserialize(packet, { headers: {} })).toBe(packet);
    expect(deserializer.deserialize({ n: 3 }, { channel: 'orders/placed' })).toEqual({
      pattern: 'orders/placed',
      data: { n: 3 },
    });
    // A binary event's data with a field named data is still the payload.
    expect(deserializer.deserialize({ data: 4 }, { channel: 'orders/placed' })).toEqual({
      pattern: 'orders/placed',
      data: { data: 4 },
    });
  });
});
