import { Inject, Injectable, Optional } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { AmbientTransaction, AmbientTransactions } from './ambient-transaction';
import { OutboxValidationError } from './errors/outbox-validation.error';
import { OutboxEvent, OutboxEventInput } from './interfaces/outbox-event.interface';
import { ResolvedOutboxOptions } from './interfaces/outbox-module-options.interface';
import { AppendableEvent, OutboxStore } from './interfaces/outbox-store.interface';
import { OUTBOX_RESOLVED_OPTIONS, OUTBOX_STORE } from './outbox.constants';
import { OutboxHandlerRegistry } from './outbox-handler.registry';
import { validateEvent } from './outbox-validation';
import { OptionKeys, refuseUnknownKeys } from './option-fields';
import { OUTBOX_TRACING } from './observability/observability.constants';
import { OutboxEvents } from './observability/outbox-events';
import type { OutboxTracing } from './observability/outbox-tracing';

export interface AppendOptions {
  /**
   * The TypeORM `EntityManager` (or `QueryRunner`) of your open transaction: the events commit or
   * roll back with it. Omitted, the append joins the ambient transaction — a `@Transactional()`
   * one of `@nestjs-cls/transactional`, else the running `@Inbox()` one — and is refused when the
   * store cannot join it (another DataSource, the Redis or memory store); with none, the store
   * writes the events on their own at once.
   */
  manager?: unknown;
  /**
   * The transaction object of your client for the 'sql' store (`{ type: 'sql', executor }`): with
   * `pgExecutor(pool)`, the `PoolClient` on which you ran `BEGIN`. The events commit or roll back
   * with it; a client outside a transaction is refused. TypeORM stores take `manager` instead.
   */
  tx?: unknown;
  /**
   * The events do not belong to any transaction open around the call: the store writes them on
   * their own, at once, and they are delivered even if that transaction rolls back. Needed to
   * append inside an ambient transaction the store cannot join (docs/publishing.md);
   * not allowed together with `manager` or `tx`. @default false
   */
  standalone?: boolean;
}

/**
 * A misspelt key (`{ mangaer }`) is refused, not ignored: ignored, the events would be written on
 * their own and published even if the caller's transaction rolled back.
 */
const APPEND_OPTION_KEYS = {
  manager: true,
  tx: true,
  standalone: true,
} satisfies OptionKeys<AppendOptions>;

const appendOptionError = (field: string, reason: string) =>
  new OutboxValidationError(field, reason);

/** Appends events to the outbox. */
@Injectable()
export class OutboxService {
  private readonly ambient: AmbientTransactions;

  constructor(
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    @Inject(OUTBOX_RESOLVED_OPTIONS) private readonly options: ResolvedOutboxOptions,
    private readonly registry: OutboxHandlerRegistry,
    moduleRef: ModuleRef,
    @Optional() private readonly events: OutboxEvents = new OutboxEvents(),
    @Optional() @Inject(OUTBOX_TRACING) private readonly tracing: OutboxTracing | null = null,
  ) {
    this.ambient = new AmbientTransactions(moduleRef);
  }

  /**
   * Validates and stores one event or a batch (all or nothing) and returns what was stored, ids
   * filled. Appending an existing id with identical content is a no-op; with different content it
   * throws `DuplicateEventError` (docs/guarantees.md, Guarantees 10).
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
    if (typeof options !== 'object' || options === null || Array.isArray(options)) {
      throw new OutboxValidationError(
        'options',
        'expected an object { manager?, tx?, standalone? } or nothing',
      );
    }
    refuseUnknownKeys('options', options, APPEND_OPTION_KEYS, appendOptionError);
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
    if (!this.tracing) return this.write(list, single, options, null);
    // A producer span; each event's headers carry its context (docs/monitoring.md).
    const types = list.map((e) => (e as { type?: unknown })?.type).map(String);
    return this.tracing.send(types, (stamp) => this.write(list, single, options, stamp));
  }

  private ambientFor(options: AppendOptions): AmbientTransaction | null {
    return ambientFor(options, this.options.store, this.ambient);
  }

  private async write<T>(
    list: OutboxEventInput<T>[],
    single: boolean,
    options: AppendOptions,
    stamp: ((headers: OutboxEventInput['headers']) => Record<string, string>) | null,
  ): Promise<OutboxEvent<T> | OutboxEvent<T>[]> {
    const { limits } = this.options;
    const events: AppendableEvent[] = new Array(list.length);
    for (let i = 0; i < list.length; i++) {
      const valid = validateEvent(list[i], limits, single ? 'event' : `events[${i}]`);
      // The trace context is added to the app's validated headers: it does not count against
      // their limits, and a value the limits would refuse (a long baggage) is left out.
      if (stamp)
        valid.headers = withTraceContext(valid.headers, stamp, limits.headerValueMaxLength);
      valid.handlers = this.registry.handlerNamesFor(valid.type);
      events[i] = valid;
    }
    const ambient = this.ambientFor(options);
    // The 'sql' store takes its client's transaction as `tx`; an ambient one goes there too.
    const sqlStore = this.options.store.type === 'sql';
    const stored = await this.store
      .append(events, {
        // (`null` is no transaction: `{ manager: this.tx ?? null }` follows the ambient rule.)
        manager: options.manager ?? (sqlStore ? undefined : ambient?.tx) ?? undefined,
        tx: options.tx ?? (sqlStore ? ambient?.tx : undefined) ?? undefined,
      })
      .catch((error: unknown) => {
        throw ambient ? refuseAmbient(ambient, error) : error;
      });
    if (this.events.wants('appended')) {
      for (let i = 0; i < stored.length; i++) {
        const { id, type } = stored[i];
        this.events.emit({
          kind: 'appended',
          eventId: id,
          type,
          handlers: events[i].handlers.length,
        });
      }
    }
    return (single ? stored[0] : stored) as OutboxEvent<T> | OutboxEvent<T>[];
  }
}

/**
 * The ambient transaction an append without `manager` joins (docs/guarantees.md, Guarantees 1), or null. One
 * the store cannot join is refused: committing the event on its own would publish it even if that
 * transaction rolled back, unless the caller said the event is independent of it (`standalone`).
 */
function ambientFor(
  options: AppendOptions,
  store: ResolvedOutboxOptions['store'],
  ambient: AmbientTransactions,
): AmbientTransaction | null {
  const { standalone } = options;
  if (standalone !== undefined && typeof standalone !== 'boolean') {
    throw new OutboxValidationError('options.standalone', 'must be true, false or left out');
  }
  // `manager: null` (e.g. `{ manager: this.tx ?? null }`) is no manager: the ambient rule applies.
  const manager = options.manager ?? undefined;
  if (standalone && manager !== undefined) {
    throw new OutboxValidationError(
      'options.standalone',
      'cannot be combined with options.manager: pass { manager } to write in that transaction, ' +
        'or { standalone: true } alone to write the events on their own',
    );
  }
  const tx = options.tx ?? undefined;
  if (tx !== undefined) {
    if (standalone || manager !== undefined) {
      throw new OutboxValidationError(
        'options.tx',
        `cannot be combined with options.${standalone ? 'standalone' : 'manager'}: pass { tx } alone to write in that transaction`,
      );
    }
    if (!joinsTransactions(store)) {
      throw new OutboxValidationError(
        'options.tx',
        `the ${store.type} store cannot write in your transaction, so the event would be published even if it rolled back; ` +
          "use the 'sql' store (store: { type: 'sql', executor: pgExecutor(pool) }) with { tx }, or the 'typeorm' store with { manager }",
      );
    }
  }
  if (standalone || manager !== undefined || tx !== undefined) return null;
  const found = ambient.current();
  if (!found || joinsTransactions(store)) return found;
  throw new OutboxValidationError(
    'options.standalone',
    `append() runs inside a ${found.source} transaction that the ${store.type} store cannot join: ` +
      'the event would be published even if that transaction rolled back, so nothing was written. ' +
      'Append after the transaction commits, use a TypeORM store on the same DataSource, or pass ' +
      '{ standalone: true } if the event must be published whatever that transaction does.',
  );
}

/** Only a SQL store (or a custom store that says so) commits events with the caller's transaction. */
function joinsTransactions(store: ResolvedOutboxOptions['store']): boolean {
  if (store.type === 'typeorm' || store.type === 'sql') return true;
  return store.type === 'custom' && store.store.joinsTransactions === true;
}

/** The validated headers plus the trace context `stamp` adds, each added value within the limit. */
function withTraceContext(
  headers: Record<string, string>,
  stamp: (headers: OutboxEventInput['headers']) => Record<string, string>,
  maxValueLength: number,
): Record<string, string> {
  const stamped = stamp(headers);
  for (const name of Object.keys(stamped)) {
    const value = stamped[name];
    if (Object.hasOwn(headers, name) || typeof value !== 'string') continue;
    if (value.length <= maxValueLength) headers[name] = value;
  }
  return headers;
}

/**
 * An ambient transaction the store cannot join (another DataSource, not a TypeORM manager) is
 * refused: committing the event on its own would publish it even if that transaction rolled back.
 */
function refuseAmbient(ambient: AmbientTransaction, error: unknown): unknown {
  if (
    !(error instanceof OutboxValidationError) ||
    (error.field !== 'options.manager' && error.field !== 'options.tx')
  ) {
    return error;
  }
  if (error.field === 'options.tx') {
    return new OutboxValidationError(
      error.field,
      `append() without tx runs inside a ${ambient.source} transaction that the outbox cannot join ` +
        `(${error.reason}). The event was not written on its own, since it would be published even if that ` +
        'transaction rolled back: pass { tx } of the outbox store’s own client explicitly, or { standalone: true }.',
    );
  }
  return new OutboxValidationError(
    error.field,
    `append() without a manager runs inside a ${ambient.source} transaction that the outbox cannot join ` +
      `(${error.reason}). The event was not written on its own, since it would be published even if that ` +
      'transaction rolled back: give the outbox the same DataSource, or pass { manager } explicitly.',
  );
}
