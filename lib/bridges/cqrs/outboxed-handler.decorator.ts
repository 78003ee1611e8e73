import type { OutboxHandlerOptions } from '../../interfaces/outbox-handler.interface';

/** Metadata key of `@OutboxedHandler()` on an `@EventsHandler` class. */
export const OUTBOXED_HANDLER_METADATA = 'outbox:cqrs-handler';

/** Outbox handler options of an `@EventsHandler` class (no `idempotency`). */
export type OutboxedHandlerOptions = Omit<OutboxHandlerOptions, 'idempotency' | 'batch'>;

/**
 * Sets the outbox handler options of an `@EventsHandler` class for its outboxed events: a stable
 * `name` (kept with each delivery, @default `ClassName.handle`), `maxAttempts`, `backoff`,
 * `timeoutMs`, `retryIf`. Without it, the dispatcher's settings apply.
 */
export function OutboxedHandler(options: OutboxedHandlerOptions): ClassDecorator {
  return (target) => {
    Reflect.defineMetadata(OUTBOXED_HANDLER_METADATA, options, target);
  };
}
