import { Inject, Injectable, OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import type { OutboxEvent } from '../../interfaces/outbox-event.interface';
import type { ResolvedOutboxOptions } from '../../interfaces/outbox-module-options.interface';
import { OUTBOX_RESOLVED_OPTIONS } from '../../outbox.constants';
import { mergeOptions } from '../../outbox.explorer';
import { OutboxHandlerRegistry } from '../../outbox-handler.registry';
import { resolveBackoff } from '../../outbox-options';
import { InboxService } from '../../inbox/inbox.service';
import { checkBridgeInbox, inboxed } from '../bridge-inbox';
import { OUTBOX_LISTENER_METADATA, OutboxListenerOptions } from './outbox-listener.decorator';

/** `@nestjs/event-emitter`'s metadata key of `@OnEvent()` (a string, so the peer is not loaded). */
const EVENT_LISTENER_METADATA = 'EVENT_LISTENER_METADATA';
const TYPE_PATTERN = /^[A-Za-z0-9._:-]{1,255}$/;

/** Registers `@OnEvent()` methods marked `@OutboxListener()` as outbox handlers of their events. */
@Injectable()
export class OutboxListenerExplorer implements OnModuleInit {
  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly registry: OutboxHandlerRegistry,
    private readonly inboxService: InboxService,
    @Inject(OUTBOX_RESOLVED_OPTIONS) private readonly options: ResolvedOutboxOptions,
  ) {}

  onModuleInit(): void {
    for (const wrapper of [...this.discovery.getProviders(), ...this.discovery.getControllers()]) {
      this.explore(wrapper);
    }
  }

  private explore(wrapper: InstanceWrapper): void {
    const { instance } = wrapper;
    if (!instance || typeof instance !== 'object' || wrapper.isAlias) return;
    const prototype = Object.getPrototypeOf(instance);
    if (!prototype) return;
    for (const methodName of this.scanner.getAllMethodNames(prototype)) {
      const method = prototype[methodName] as (...args: unknown[]) => unknown;
      const marked: OutboxListenerOptions | undefined = Reflect.getMetadata(
        OUTBOX_LISTENER_METADATA,
        method,
      );
      if (marked === undefined) continue;
      const source = `${instance.constructor.name}.${methodName}`;
      const listeners: { event: unknown }[] =
        Reflect.getMetadata(EVENT_LISTENER_METADATA, method) ?? [];
      if (listeners.length === 0) {
        throw new OutboxOptionsError(
          `@OutboxListener on ${source}`,
          "needs @OnEvent('type') on the same method",
        );
      }
      if (!wrapper.isDependencyTreeStatic()) {
        throw new OutboxOptionsError(
          `@OutboxListener on ${source}`,
          'the dispatcher runs singleton handlers only; make the provider and its dependencies default-scoped',
        );
      }
      const types = listeners.map(({ event }) => {
        if (typeof event !== 'string' || !TYPE_PATTERN.test(event)) {
          throw new OutboxOptionsError(
            `@OutboxListener on ${source}`,
            `its @OnEvent name ${typeof event === 'symbol' ? event.toString() : JSON.stringify(event)} is not an outbox type ` +
              '(1–255 characters of [A-Za-z0-9._:-], no wildcards or arrays)',
          );
        }
        return event;
      });
      if (marked && typeof marked === 'object' && 'idempotency' in marked) {
        throw new OutboxOptionsError(
          `@OutboxListener idempotency on ${source}`,
          'not supported on listeners; use @OutboxHandler, or @Inbox() in the listener',
        );
      }
      if (marked && typeof marked === 'object' && 'batch' in marked) {
        throw new OutboxOptionsError(
          `@OutboxListener batch on ${source}`,
          'not supported on listeners (they take one event); use @OutboxHandler(type, { batch }) for batch handlers',
        );
      }
      const { inbox, ...rest } = marked ?? {};
      checkBridgeInbox(`@OutboxListener inbox on ${source}`, inbox);
      const options = mergeOptions(source, [rest]);
      const name = options.name ?? source;
      const listen = (event: OutboxEvent) => method.call(instance, event.payload, event);
      this.registry.register({
        name,
        types: [...new Set(types)],
        source,
        maxAttempts: options.maxAttempts,
        backoff:
          options.backoff === undefined
            ? undefined
            : resolveBackoff(
                '@OutboxListener backoff',
                options.backoff,
                this.options.dispatcher.backoff,
                ` on ${source}`,
              ),
        timeoutMs: options.timeoutMs,
        retryIf: options.retryIf,
        invoke: inboxed(inbox, name, () => this.inboxService, listen) ?? (async (e) => listen(e)),
      });
    }
  }
}
