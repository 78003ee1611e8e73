import type { OutboxHandlerOptions } from '../../interfaces/outbox-handler.interface';
import type { BridgeInboxOption } from '../bridge-inbox';

/** Metadata key of `@OutboxedHandler()` on an `@EventsHandler` class. */
export const OUTBOXED_HANDLER_METADATA = 'outbox:cqrs-handler';

/** Outbox handler options of an `@EventsHandler` class (no `idempotency`, no `batch`). */
export type OutboxedHandlerOptions = Omit<OutboxHandlerOptions, 'idempotency' | 'batch'> & {
  /**
   * Runs `handle()` as `@Inbox()` runs a consumer: in an inbox transaction that records
   * `(consumer, event id)` first, so a redelivered event has no second effect. Inside `handle()`,
   * `InboxContext.manager` / `InboxContext.tx` is that transaction. `consumer` @default the
   * handler's name. @default false
   */
  inbox?: BridgeInboxOption;
};

/**
 * Sets the outbox handler options of an `@EventsHandler` class for its outboxed events: a stable
 * `name` (kept with each delivery, @default `ClassName.handle`), `maxAttempts`, `backoff`,
 * `timeoutMs`, `retryIf`, and `inbox` (dedup of redeliveries). Without it, the dispatcher's
 * settings apply.
 */
export function OutboxedHandler(options: OutboxedHandlerOptions): ClassDecorator {
  return (target) => {
    Reflect.defineMetadata(OUTBOXED_HANDLER_METADATA, options, target);
  };
}
