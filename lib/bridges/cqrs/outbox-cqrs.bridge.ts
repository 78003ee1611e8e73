import { Inject, Injectable, Logger, OnModuleInit } from '@nestjs/common';
import { DiscoveryService, ModuleRef } from '@nestjs/core';
import type { EventBus, IEventHandler } from '@nestjs/cqrs';
import { AmbientTransactions } from '../../ambient-transaction';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import type { OutboxEvent, OutboxEventInput } from '../../interfaces/outbox-event.interface';
import { OutboxHandlerRegistry } from '../../outbox-handler.registry';
import { OutboxService } from '../../outbox.service';
import { InboxService } from '../../inbox/inbox.service';
import { checkBridgeInbox, inboxed } from '../bridge-inbox';
import { OutboxMessages } from '../../outbox.messages';
import { assertInstalled } from '../../optional-peers';
import type { ResolvedOutboxOptions } from '../../interfaces/outbox-module-options.interface';
import { OUTBOX_RESOLVED_OPTIONS } from '../../outbox.constants';
import { mergeOptions } from '../../outbox.explorer';
import { resolveBackoff } from '../../outbox-options';
import { OUTBOXED_HANDLER_METADATA, OutboxedHandlerOptions } from './outboxed-handler.decorator';
import { OUTBOX_CQRS_OPTIONS, OutboxCqrsModuleOptions } from './outbox-cqrs.options';
import { OutboxedEvents, OutboxEventPublisher } from './outbox-event.publisher';
import {
  EVENT_VERSION_HEADER,
  OutboxedEventSpec,
  outboxedEventSpec,
} from './outboxed-event.decorator';
import { holdTransactionFor } from './transaction-end';

/** `@nestjs/cqrs`'s metadata key of `@EventsHandler()` (the event classes a handler takes). */
const EVENTS_HANDLER_METADATA = '__eventsHandler__';

/**
 * Puts the outbox behind `@nestjs/cqrs`: wraps `EventBus.publisher` so outboxed events are
 * appended, and registers every `@EventsHandler` of an outboxed event class as an outbox handler,
 * which the dispatcher runs with the payload turned back into an instance of the class.
 */
@Injectable()
export class OutboxCqrsBridge implements OnModuleInit, OutboxedEvents {
  private readonly logger = new Logger('OutboxCqrs');
  private readonly specs = new WeakMap<Function, OutboxedEventSpec | null>();
  private readonly byType = new Map<string, OutboxedEventSpec>();
  private readonly ambient: AmbientTransactions;
  private outbox!: OutboxService;

  constructor(
    private readonly moduleRef: ModuleRef,
    private readonly discovery: DiscoveryService,
    @Inject(OUTBOX_CQRS_OPTIONS) private readonly options: OutboxCqrsModuleOptions,
  ) {
    this.ambient = new AmbientTransactions(moduleRef);
  }

  onModuleInit(): void {
    assertInstalled('OutboxCqrsModule', ['@nestjs/cqrs']);
    const cqrs = require('@nestjs/cqrs') as typeof import('@nestjs/cqrs');
    this.outbox = this.get<OutboxService>(OutboxService, 'OutboxModule.forRoot()');
    const registry = this.get<OutboxHandlerRegistry>(
      OutboxHandlerRegistry,
      'OutboxModule.forRoot()',
    );
    const bus = this.get(cqrs.EventBus, 'CqrsModule.forRoot()') as EventBus;
    const resolved = this.get<ResolvedOutboxOptions>(
      OUTBOX_RESOLVED_OPTIONS,
      'OutboxModule.forRoot()',
    );
    this.registerHandlers(registry, resolved);
    if (!(bus.publisher instanceof OutboxEventPublisher)) {
      bus.publisher = new OutboxEventPublisher(bus.publisher, this);
    }
  }

  specOf(event: object): OutboxedEventSpec | null {
    const eventClass = (event as { constructor?: Function }).constructor;
    if (typeof eventClass !== 'function' || eventClass === Object) return null;
    let spec = this.specs.get(eventClass);
    if (spec === undefined) {
      spec = outboxedEventSpec(eventClass, this.options.allEvents === true);
      this.specs.set(eventClass, spec);
    }
    return spec;
  }

  append(
    events: { event: object; spec: OutboxedEventSpec }[],
    aggregate: unknown,
  ): Promise<unknown> {
    const inputs: OutboxEventInput[] = events.map(({ event, spec }) => ({
      type: spec.type,
      key: this.keyOf(event, spec, aggregate),
      payload: event,
      headers: { [EVENT_VERSION_HEADER]: String(spec.version) },
    }));
    // Looked up now, in the publisher's async context; append() reads it synchronously too.
    const ambient = this.ambient.current();
    const appended = this.outbox.append(inputs);
    const held = ambient !== null && holdTransactionFor(ambient.tx, appended);
    appended.catch((error: unknown) => {
      // A held append fails the commit instead; an unawaited one must not crash the process.
      if (!held)
        this.logger.error(
          OutboxMessages.bridgeAppendFailed(
            inputs.map((i) => i.type),
            error,
          ),
        );
    });
    return appended;
  }

  private keyOf(
    event: object,
    spec: OutboxedEventSpec,
    aggregate: unknown,
  ): string | null | undefined {
    if (spec.key) return spec.key(event);
    if (this.options.key) return this.options.key(event, aggregate);
    const id = (aggregate as { id?: unknown } | null | undefined)?.id;
    return typeof id === 'string' || typeof id === 'number' ? String(id) : undefined;
  }

  private registerHandlers(registry: OutboxHandlerRegistry, resolved: ResolvedOutboxOptions): void {
    for (const wrapper of this.discovery.getProviders()) {
      const metatype = wrapper.metatype as Function | null | undefined;
      if (typeof metatype !== 'function') continue;
      const eventClasses: Function[] | undefined = Reflect.getMetadata(
        EVENTS_HANDLER_METADATA,
        metatype,
      );
      if (!eventClasses?.length) continue;
      const specs = eventClasses
        .map((eventClass) => outboxedEventSpec(eventClass, this.options.allEvents === true))
        .filter((spec): spec is OutboxedEventSpec => spec !== null);
      if (specs.length === 0) continue;
      const source = `${metatype.name}.handle`;
      if (!wrapper.isDependencyTreeStatic() || !wrapper.instance) {
        throw new OutboxOptionsError(
          `@EventsHandler ${metatype.name}`,
          `handles ${specs.map((s) => s.eventClass.name).join(', ')}, which go through the outbox, but is not a singleton: ` +
            'the dispatcher runs singleton handlers only; make it and its dependencies default-scoped',
        );
      }
      for (const spec of specs) this.remember(spec);
      const handler = wrapper.instance as IEventHandler;
      const { inbox, ...options } = handlerOptions(metatype, source);
      const name = options.name ?? source;
      const handle = (event: OutboxEvent) => handler.handle(this.instanceOf(event));
      registry.register({
        name,
        types: [...new Set(specs.map((s) => s.type))],
        source,
        maxAttempts: options.maxAttempts,
        backoff:
          options.backoff === undefined
            ? undefined
            : resolveBackoff(
                '@OutboxedHandler backoff',
                options.backoff,
                resolved.dispatcher.backoff,
                ` on ${metatype.name}`,
              ),
        timeoutMs: options.timeoutMs,
        retryIf: options.retryIf,
        invoke: inboxed(inbox, name, () => this.inboxService(), handle) ?? (async (e) => handle(e)),
      });
    }
  }

  private inbox: InboxService | undefined;

  private inboxService(): InboxService {
    return (this.inbox ??= this.get<InboxService>(InboxService, 'OutboxModule.forRoot()'));
  }

  /** One class per type name: two classes under one name would be rebuilt as the wrong one. */
  private remember(spec: OutboxedEventSpec): void {
    const known = this.byType.get(spec.type);
    if (known && known.eventClass !== spec.eventClass) {
      throw new OutboxOptionsError(
        `@OutboxedEvent type "${spec.type}"`,
        `used by both ${known.eventClass.name} and ${spec.eventClass.name}; give one of them another type`,
      );
    }
    this.byType.set(spec.type, spec);
    this.specs.set(spec.eventClass, spec);
  }

  private instanceOf(event: OutboxEvent): object {
    const spec = this.byType.get(event.type)!;
    const version = Number(event.headers[EVENT_VERSION_HEADER] ?? 1);
    return spec.fromPayload(event.payload, Number.isInteger(version) ? version : 1);
  }

  private get<T>(token: Function | symbol, module: string): T {
    try {
      return this.moduleRef.get(token as never, { strict: false }) as T;
    } catch {
      const name = typeof token === 'symbol' ? token.description : token.name;
      throw new OutboxOptionsError(
        'OutboxCqrsModule',
        `needs ${name}: import ${module} in the application`,
      );
    }
  }
}

/** The validated `@OutboxedHandler()` options of an `@EventsHandler` class, or none. */
function handlerOptions(metatype: Function, source: string): OutboxedHandlerOptions {
  const options: OutboxedHandlerOptions | undefined = Reflect.getOwnMetadata(
    OUTBOXED_HANDLER_METADATA,
    metatype,
  );
  if (options === undefined) return {};
  if (options && typeof options === 'object' && 'idempotency' in options) {
    throw new OutboxOptionsError(
      `@OutboxedHandler idempotency on ${metatype.name}`,
      'not supported on @EventsHandler classes; use @OutboxHandler for duplicate suppression',
    );
  }
  if (options && typeof options === 'object' && 'batch' in options) {
    throw new OutboxOptionsError(
      `@OutboxedHandler batch on ${metatype.name}`,
      'not supported on @EventsHandler classes (they take one event); use @OutboxHandler(type, { batch }) for batch handlers',
    );
  }
  const { inbox, ...rest } = options ?? {};
  checkBridgeInbox(`@OutboxedHandler inbox on ${metatype.name}`, inbox);
  return { ...mergeOptions(source, [rest]), inbox };
}
