export { OutboxCqrsModule } from './outbox-cqrs.module';
export type { OutboxCqrsModuleOptions } from './outbox-cqrs.options';
export { OutboxedEvent, EVENT_VERSION_HEADER } from './outboxed-event.decorator';
export type { OutboxedEventOptions } from './outboxed-event.decorator';
export { OutboxedHandler } from './outboxed-handler.decorator';
export type { OutboxedHandlerOptions } from './outboxed-handler.decorator';
