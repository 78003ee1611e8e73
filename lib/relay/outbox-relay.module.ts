import { DynamicModule, Module } from '@nestjs/common';
import type {
  OutboxRelayCloudEventsOptions,
  OutboxRelayOptions,
} from './outbox-relay-options.interface';
import { OutboxRelayOptionsError } from './outbox-relay-options.error';
import { createRelayClass, getOutboxRelayToken } from './outbox-relay';
import { uriReferenceFault } from './relay-cloud-event';
import { unstorableText } from '../outbox-validation';
import { OptionKeys, refuseUnknownKeys, shown } from '../option-fields';

const TYPE_PATTERN = /^[A-Za-z0-9._:-]{1,255}$/;

/**
 * Relays outbox events to a broker: `OutboxRelayModule.register({ name, client, types })` adds one
 * outbox handler that publishes each event of `types` with the given `@nestjs/microservices`
 * client and is acknowledged only after the broker confirmed. Import it next to `OutboxModule`;
 * register several for several brokers or routes.
 */
@Module({})
export class OutboxRelayModule {
  static register(options: OutboxRelayOptions): DynamicModule {
    validateRelayOptions(options);
    const relay = createRelayClass(options);
    const token = getOutboxRelayToken(options.name);
    return {
      module: OutboxRelayModule,
      // One provider only: an alias would be a second instance wrapper for the explorer to find.
      providers: [{ provide: token, useClass: relay }],
      exports: [token],
    };
  }
}

const RELAY_KEYS = {
  name: true,
  client: true,
  types: true,
  filter: true,
  pattern: true,
  publishTimeoutMs: true,
  mqttQos: true,
  cloudEvents: true,
  maxAttempts: true,
  backoff: true,
  timeoutMs: true,
} satisfies OptionKeys<OutboxRelayOptions>;

const CLOUD_EVENTS_KEYS = {
  source: true,
  mode: true,
} satisfies OptionKeys<OutboxRelayCloudEventsOptions>;

function validateRelayOptions(options: OutboxRelayOptions): void {
  if (typeof options !== 'object' || options === null) {
    throw new OutboxRelayOptionsError('options', 'expected { name, client, types }');
  }
  refuseUnknownKeys('', options, RELAY_KEYS, (f, r) => new OutboxRelayOptionsError(f, r));
  const { name, client, types, filter, pattern, publishTimeoutMs, mqttQos } = options;
  if (typeof name !== 'string' || name.length === 0 || name.length > 255 || name === '*') {
    throw new OutboxRelayOptionsError(
      'name',
      `expected a stable handler name of 1–255 characters (not "*"), got ${JSON.stringify(name)}`,
    );
  }
  const fault = unstorableText(name);
  if (fault) throw new OutboxRelayOptionsError('name', fault);
  if (client === undefined || client === null) {
    throw new OutboxRelayOptionsError(
      'client',
      'expected the injection token of a ClientProxy or client options ({ transport, options })',
    );
  }
  const list = Array.isArray(types) ? types : [types];
  if (list.length === 0 || list.some((t) => typeof t !== 'string' || !TYPE_PATTERN.test(t))) {
    throw new OutboxRelayOptionsError(
      'types',
      `expected one or more event types of 1–255 characters of [A-Za-z0-9._:-], got ${JSON.stringify(types)}`,
    );
  }
  for (const [field, value] of [
    ['filter', filter],
    ['pattern', pattern],
  ] as const) {
    if (value !== undefined && typeof value !== 'function') {
      throw new OutboxRelayOptionsError(field, 'expected a function of the event');
    }
  }
  if (
    publishTimeoutMs !== undefined &&
    (!Number.isInteger(publishTimeoutMs) || publishTimeoutMs < 1)
  ) {
    throw new OutboxRelayOptionsError(
      'publishTimeoutMs',
      `expected an integer ≥ 1 (milliseconds), got ${shown(publishTimeoutMs)}`,
    );
  }
  if (mqttQos !== undefined && mqttQos !== 1 && mqttQos !== 2) {
    throw new OutboxRelayOptionsError(
      'mqttQos',
      `expected 1 or 2 (QoS 0 has no acknowledgement), got ${shown(mqttQos)}`,
    );
  }
  if (options.cloudEvents !== undefined) validateCloudEvents(options.cloudEvents);
}

function validateCloudEvents(cloudEvents: OutboxRelayCloudEventsOptions): void {
  if (typeof cloudEvents !== 'object' || cloudEvents === null || Array.isArray(cloudEvents)) {
    throw new OutboxRelayOptionsError(
      'cloudEvents',
      `expected { source, mode? }, got ${JSON.stringify(cloudEvents)}`,
    );
  }
  refuseUnknownKeys(
    'cloudEvents',
    cloudEvents,
    CLOUD_EVENTS_KEYS,
    (f, r) => new OutboxRelayOptionsError(f, r),
  );
  const { source, mode } = cloudEvents;
  if (typeof source !== 'string' || source.length === 0) {
    throw new OutboxRelayOptionsError(
      'cloudEvents.source',
      `expected a non-empty URI-reference naming the producer (e.g. '/orders-service' or ` +
        `'urn:example:orders'), got ${JSON.stringify(source)}`,
    );
  }
  const fault = uriReferenceFault(source);
  if (fault) {
    throw new OutboxRelayOptionsError(
      'cloudEvents.source',
      `${JSON.stringify(source)} is not a URI-reference: it ${fault}`,
    );
  }
  if (mode !== undefined && mode !== 'structured' && mode !== 'binary') {
    throw new OutboxRelayOptionsError(
      'cloudEvents.mode',
      `expected 'structured' or 'binary', got ${JSON.stringify(mode)}`,
    );
  }
}
