import { Inject, Injectable } from '@nestjs/common';
import { OutboxValidationError } from './errors/outbox-validation.error';
import { OutboxEvent, OutboxEventInput } from './interfaces/outbox-event.interface';
import { ResolvedOutboxOptions } from './interfaces/outbox-module-options.interface';
import { AppendableEvent, OutboxStore } from './interfaces/outbox-store.interface';
import { OUTBOX_RESOLVED_OPTIONS, OUTBOX_STORE } from './outbox.constants';
import { OutboxHandlerRegistry } from './outbox-handler.registry';
import { validateEvent } from './outbox-validation';

export interface AppendOptions {
  /**
   * The TypeORM `EntityManager` (or `QueryRunner`) of your open transaction: the events commit or
   * roll back with it. Omit it to let the store use a short transaction of its own.
   */
  manager?: unknown;
}

/** Appends events to the outbox. */
@Injectable()
export class OutboxService {
  constructor(
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    @Inject(OUTBOX_RESOLVED_OPTIONS) private readonly options: ResolvedOutboxOptions,
    private readonly registry: OutboxHandlerRegistry,
  ) {}

  /**
   * Validates and stores one event or a batch (all or nothing) and returns what was stored, ids
   * filled. Appending an existing id with identical content is a no-op; with different content it
   * throws `DuplicateEventError` (SPEC §2.10).
   */
  append<T = unknown>(event: OutboxEventInput<T>, options?: AppendOptions): Promise<OutboxEvent<T>>;
  append<T = unknown>(
    events: OutboxEventInput<T>[],
    options?: AppendOptions,
  ): Promise<OutboxEvent<T>[]>;
  async append<T>(
    input: OutboxEventInput<T> | OutboxEventInput<T>[],
    options: AppendOptions = {},
  ): Promise<OutboxEvent<T> | OutboxEvent<T>[]> {
    const single = !Array.isArray(input);
    const list = single ? [input] : input;
    const { limits } = this.options;
    if (list.length === 0) return [];
    if (list.length > limits.appendMaxEvents) {
      throw new OutboxValidationError(
        'events',
        `has ${list.length} events, over the limit of ${limits.appendMaxEvents} per append (limits.appendMaxEvents)`,
      );
    }
    const events: AppendableEvent[] = list.map((e, i) => {
      const valid = validateEvent(e, limits, single ? 'event' : `events[${i}]`);
      return { ...valid, handlers: this.registry.handlerNamesFor(valid.type) };
    });
    const stored = await this.store.append(events, { manager: options.manager });
    return (single ? stored[0] : stored) as OutboxEvent<T> | OutboxEvent<T>[];
  }
}
