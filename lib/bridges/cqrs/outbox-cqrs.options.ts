/** Options of `OutboxCqrsModule.forRoot()`. */
export interface OutboxCqrsModuleOptions {
  /**
   * Send every event class through the outbox, not only those with `@OutboxedEvent()`; a class
   * without the decorator is stored under its class name, version 1. @default false
   */
  allEvents?: boolean;
  /**
   * Ordering key of an event whose `@OutboxedEvent()` gives none; `aggregate` is the publishing
   * aggregate of `commit()` (undefined for `EventBus.publish()`).
   * @default the aggregate's `id` when it is a string or a number, else no key
   */
  key?: (event: object, aggregate: unknown) => string | null | undefined;
}

export const OUTBOX_CQRS_OPTIONS = 'outbox:cqrs-options';
