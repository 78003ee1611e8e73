import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { shown } from '../../option-fields';

/** Metadata key of `@OutboxedEvent()` on an event class. */
export const OUTBOXED_EVENT_METADATA = 'outbox:cqrs-event';

/** Header holding the version of an event class's payload shape. */
export const EVENT_VERSION_HEADER = 'event-version';

const TYPE_PATTERN = /^[A-Za-z0-9._:-]{1,255}$/;

/** How one event class travels through the outbox. */
export interface OutboxedEventOptions<E = any> {
  /** Stable type name stored with the event; keep it when renaming the class. @default the class name */
  type?: string;
  /** Version of the payload shape, stored in the `event-version` header. @default 1 */
  version?: number;
  /**
   * Ordering key (e.g. the aggregate id): events with one key reach each handler in order.
   * @default OutboxCqrsModule's `key`, else the publishing aggregate's `id`, else none
   */
  key?: (event: E) => string | null | undefined;
  /**
   * Builds the instance handed to `@EventsHandler` classes from the stored payload and its version.
   * @default an instance of the class with the payload's fields assigned (no constructor call)
   */
  fromPayload?: (payload: any, version: number) => E;
}

/** What the bridge knows of one event class. */
export interface OutboxedEventSpec {
  type: string;
  version: number;
  key?: (event: any) => string | null | undefined;
  fromPayload: (payload: any, version: number) => object;
  eventClass: Function;
}

/**
 * Sends an event class of `@nestjs/cqrs` through the outbox: published with `EventBus.publish()` /
 * `publishAll()` or an aggregate's `commit()`, it is appended in the ambient transaction and its
 * `@EventsHandler` classes run from the dispatcher (docs/domain-events.md). Needs `OutboxCqrsModule`.
 */
export function OutboxedEvent(options: OutboxedEventOptions = {}): ClassDecorator {
  return (target) => {
    const field = (name: string) => `@OutboxedEvent ${name} on ${target.name}`;
    if (typeof options !== 'object' || options === null) {
      throw new OutboxOptionsError(
        field('options'),
        `expected an options object, got ${JSON.stringify(options)}`,
      );
    }
    const { type, version, key, fromPayload } = options;
    if (type !== undefined && (typeof type !== 'string' || !TYPE_PATTERN.test(type))) {
      throw new OutboxOptionsError(
        field('type'),
        `${JSON.stringify(type)} is not 1–255 characters of [A-Za-z0-9._:-]`,
      );
    }
    if (version !== undefined && (!Number.isInteger(version) || version < 1)) {
      throw new OutboxOptionsError(
        field('version'),
        `expected an integer ≥ 1, got ${shown(version)}`,
      );
    }
    for (const [name, value] of [
      ['key', key],
      ['fromPayload', fromPayload],
    ] as const) {
      if (value !== undefined && typeof value !== 'function') {
        throw new OutboxOptionsError(field(name), 'expected a function');
      }
    }
    Reflect.defineMetadata(OUTBOXED_EVENT_METADATA, options, target);
  };
}

/**
 * The spec of `eventClass`: from its `@OutboxedEvent()`, or the defaults when `all` opts in every
 * class; null when the class stays in memory.
 */
export function outboxedEventSpec(eventClass: Function, all: boolean): OutboxedEventSpec | null {
  const options: OutboxedEventOptions | undefined = Reflect.getOwnMetadata(
    OUTBOXED_EVENT_METADATA,
    eventClass,
  );
  if (!options && !all) return null;
  const type = options?.type ?? eventClass.name;
  if (!TYPE_PATTERN.test(type)) {
    throw new OutboxOptionsError(
      `event class ${JSON.stringify(eventClass.name)}`,
      'its name is not a valid outbox type (1–255 characters of [A-Za-z0-9._:-]); give it @OutboxedEvent({ type })',
    );
  }
  return {
    type,
    version: options?.version ?? 1,
    key: options?.key,
    fromPayload: options?.fromPayload ?? ((payload) => rehydrate(eventClass, payload)),
    eventClass,
  };
}

/** An instance of `eventClass` carrying the payload's fields, without running its constructor. */
function rehydrate(eventClass: Function, payload: unknown): object {
  const instance = Object.create(eventClass.prototype as object) as object;
  if (payload && typeof payload === 'object') Object.assign(instance, payload);
  return instance;
}
