export { OutboxRelayModule } from './outbox-relay.module';
export { OutboxRelay, getOutboxRelayToken } from './outbox-relay';
export type {
  OutboxRelayOptions,
  OutboxRelayCloudEventsOptions,
  OutboxCloudEvent,
  OutboxRelayMessage,
  OutboxRelayStats,
  OutboxRelayClientOptions,
  RelayTransport,
} from './outbox-relay-options.interface';
export { OutboxRelayOptionsError } from './outbox-relay-options.error';
export { RelayPublishTimeoutError } from './relay-publish-timeout.error';
export { RELAY_HEADERS, TRACE_HEADERS } from './relay-message';
export { CloudEventsDeserializer } from './cloud-events.deserializer';
