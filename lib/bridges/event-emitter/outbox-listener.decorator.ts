import { SetMetadata } from '@nestjs/common';
import type { OutboxHandlerOptions } from '../../interfaces/outbox-handler.interface';
import type { BridgeInboxOption } from '../bridge-inbox';

/** Metadata key of `@OutboxListener()` on a method. */
export const OUTBOX_LISTENER_METADATA = 'outbox:listener';

/** Handler options of an outbox listener (no `idempotency`, no `batch`). */
export type OutboxListenerOptions = Omit<OutboxHandlerOptions, 'idempotency' | 'batch'> & {
  /**
   * Runs the listener as `@Inbox()` runs a consumer: in an inbox transaction that records
   * `(consumer, event id)` first, so a redelivered event has no second effect; `InboxContext` is
   * that transaction inside it. `consumer` @default the handler's name. @default false
   */
  inbox?: BridgeInboxOption;
};

/**
 * Makes an `@OnEvent('order.placed')` listener of `@nestjs/event-emitter` an outbox handler too:
 * `append()` of type `order.placed` reaches it through the dispatcher (retries, dead letters, order
 * per key), called as `(payload, event)`. Stack it with `@OnEvent()`; the names must be plain
 * outbox types (no wildcards). In-memory `emit()` still calls it as before (docs/domain-events.md).
 */
export function OutboxListener(options: OutboxListenerOptions = {}): MethodDecorator {
  return SetMetadata(OUTBOX_LISTENER_METADATA, options);
}
