/** Injection token of the `OutboxTracing` instance, or `null` when tracing is off. */
export const OUTBOX_TRACING = Symbol('OUTBOX_TRACING');
