import type { IEvent, IEventPublisher } from '@nestjs/cqrs';
import type { OutboxedEventSpec } from './outboxed-event.decorator';

/** What the publisher asks of the bridge. */
export interface OutboxedEvents {
  /** The spec of the event's class, or null when it stays in memory. */
  specOf(event: object): OutboxedEventSpec | null;
  /** Appends the events in the ambient transaction (or on their own without one). */
  append(
    events: { event: object; spec: OutboxedEventSpec }[],
    aggregate: unknown,
  ): Promise<unknown>;
}

/**
 * `EventBus.publisher` while the bridge is on: outboxed events are appended (the returned promise
 * settles with the append), every other event goes to the publisher that was there before
 * (Nest's in-memory one unless the app set its own).
 */
export class OutboxEventPublisher implements IEventPublisher {
  constructor(
    readonly inner: IEventPublisher,
    private readonly outboxed: OutboxedEvents,
  ) {}

  publish<T extends IEvent>(event: T, dispatcher?: unknown, asyncContext?: never): unknown {
    const spec = event && typeof event === 'object' ? this.outboxed.specOf(event) : null;
    if (!spec) return this.inner.publish(event, dispatcher, asyncContext);
    return this.outboxed.append([{ event, spec }], dispatcher);
  }

  publishAll<T extends IEvent>(events: T[], dispatcher?: unknown, asyncContext?: never): unknown {
    const outboxed: { event: object; spec: OutboxedEventSpec }[] = [];
    const rest: T[] = [];
    // Read now: AggregateRoot.commit() empties this array once publishAll returns.
    for (const event of events ?? []) {
      const spec = event && typeof event === 'object' ? this.outboxed.specOf(event) : null;
      if (spec) outboxed.push({ event, spec });
      else rest.push(event);
    }
    let inMemory: unknown;
    if (rest.length > 0) {
      inMemory = this.inner.publishAll
        ? this.inner.publishAll(rest, dispatcher, asyncContext)
        : rest.map((event) => this.inner.publish(event, dispatcher, asyncContext));
    }
    if (outboxed.length === 0) return inMemory;
    return this.outboxed.append(outboxed, dispatcher);
  }
}
