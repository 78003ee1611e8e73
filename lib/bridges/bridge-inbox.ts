import { OutboxOptionsError } from '../errors/outbox-options.error';
import { runInInboxScope } from '../inbox/inbox.context';
import type { InboxService } from '../inbox/inbox.service';
import type { OutboxEvent } from '../interfaces/outbox-event.interface';

/**
 * A bridge handler's `inbox` option: run it as `@Inbox()` runs a consumer, in an inbox transaction
 * that records `(consumer, event id)` first. `consumer` @default the handler's name.
 */
export type BridgeInboxOption = boolean | { consumer?: string };

/** The option checked at bootstrap; `field` names it in the error. */
export function checkBridgeInbox(field: string, inbox: unknown): BridgeInboxOption | undefined {
  if (inbox === undefined || typeof inbox === 'boolean') return inbox;
  const consumer = (inbox as { consumer?: unknown } | null)?.consumer;
  if (
    typeof inbox !== 'object' ||
    inbox === null ||
    Object.keys(inbox).some((k) => k !== 'consumer') ||
    (consumer !== undefined && (typeof consumer !== 'string' || consumer.length === 0))
  ) {
    throw new OutboxOptionsError(field, 'expected true, false or { consumer: string }');
  }
  return inbox as { consumer?: string };
}

/**
 * `handle` wrapped so each call runs in an inbox transaction keyed by (consumer, event id), with
 * `InboxContext` set as in an `@Inbox()` method: a redelivered event finds its record and is
 * acknowledged without a second effect. `null` when the option is off.
 */
export function inboxed(
  inbox: BridgeInboxOption | undefined,
  name: string,
  service: () => InboxService,
  handle: (event: OutboxEvent) => unknown,
): ((event: OutboxEvent) => Promise<unknown>) | null {
  if (!inbox) return null;
  const consumer = inbox === true ? name : (inbox.consumer ?? name);
  return async (event) => {
    const messageId = event.id;
    await service().run({ consumer, messageId }, (tx, client) =>
      runInInboxScope({ tx, client, consumer, messageId }, async () => handle(event)),
    );
  };
}
