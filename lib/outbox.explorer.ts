import { Inject, Injectable, Logger, OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, ModuleRef } from '@nestjs/core';
import { ExternalContextCreator } from '@nestjs/core/helpers/external-context-creator';
import { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper';
import { OutboxOptionsError } from './errors/outbox-options.error';
import { IdempotencyStore } from './idempotency/idempotency-store.interface';
import { runIdempotent } from './idempotency/run-idempotent';
import { OutboxEvent } from './interfaces/outbox-event.interface';
import {
  OutboxHandlerContext,
  OutboxHandlerIdempotencyOptions,
  OutboxHandlerOptions,
} from './interfaces/outbox-handler.interface';
import { ResolvedOutboxOptions } from './interfaces/outbox-module-options.interface';
import {
  OUTBOX_CONTEXT_TYPE,
  OUTBOX_RESOLVED_OPTIONS,
  UNEXPANDED_HANDLER,
} from './outbox.constants';
import { OutboxHandlerRegistry } from './outbox-handler.registry';
import { OutboxMetadataAccessor } from './outbox-metadata.accessor';
import { OutboxMessages } from './outbox.messages';
import { resolveBackoff } from './outbox-options';

const TYPE_PATTERN = /^[A-Za-z0-9._:-]{1,255}$/;

/** Finds `@OutboxHandler()` methods on static providers at module init and registers them. */
@Injectable()
export class OutboxExplorer implements OnModuleInit {
  private readonly logger = new Logger('OutboxExplorer');

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly accessor: OutboxMetadataAccessor,
    private readonly contextCreator: ExternalContextCreator,
    private readonly registry: OutboxHandlerRegistry,
    private readonly moduleRef: ModuleRef,
    @Inject(OUTBOX_RESOLVED_OPTIONS) private readonly options: ResolvedOutboxOptions,
  ) {}

  onModuleInit(): void {
    for (const wrapper of [...this.discovery.getProviders(), ...this.discovery.getControllers()]) {
      this.explore(wrapper);
    }
  }

  private explore(wrapper: InstanceWrapper): void {
    const { instance } = wrapper;
    if (!instance || typeof instance !== 'object') return;
    const prototype = Object.getPrototypeOf(instance);
    if (!prototype) return;
    for (const methodName of this.scanner.getAllMethodNames(prototype)) {
      const metadata = this.accessor.getHandlerMetadata(prototype[methodName]);
      if (!metadata?.length) continue;
      const source = `${instance.constructor.name}.${methodName}`;
      if (!wrapper.isDependencyTreeStatic()) {
        this.logger.warn(OutboxMessages.requestScopedHandler(source));
        continue;
      }
      const options = mergeOptions(
        source,
        metadata.map((m) => m.options),
      );
      const types = [...new Set(metadata.flatMap((m) => m.types))];
      for (const type of types) {
        if (typeof type !== 'string' || !TYPE_PATTERN.test(type)) {
          throw new OutboxOptionsError(
            `@OutboxHandler type on ${source}`,
            `${JSON.stringify(type)} is not 1–255 characters of [A-Za-z0-9._:-]`,
          );
        }
      }
      const name = options.name ?? source;
      if (name === UNEXPANDED_HANDLER || name.length > 255 || name.length === 0) {
        throw new OutboxOptionsError(
          `@OutboxHandler name on ${source}`,
          'must be 1–255 characters and not "*"',
        );
      }
      const invoke = this.contextCreator.create(
        instance,
        prototype[methodName],
        methodName,
        undefined,
        undefined,
        undefined,
        undefined,
        { guards: true, interceptors: true, filters: true },
        OUTBOX_CONTEXT_TYPE,
      );
      this.registry.register({
        name,
        types,
        source,
        maxAttempts: options.maxAttempts,
        backoff:
          options.backoff === undefined
            ? undefined
            : resolveBackoff(
                `@OutboxHandler backoff on ${source}`,
                options.backoff,
                this.options.dispatcher.backoff,
              ),
        timeoutMs: options.timeoutMs,
        retryIf: options.retryIf,
        invoke: this.withIdempotency(name, source, options, (event, context) =>
          invoke(event, context),
        ),
      });
    }
  }

  private withIdempotency(
    name: string,
    source: string,
    options: OutboxHandlerOptions,
    invoke: (event: OutboxEvent, context: OutboxHandlerContext) => Promise<unknown>,
  ): (event: OutboxEvent, context: OutboxHandlerContext) => Promise<unknown> {
    const idempotency = options.idempotency;
    if (!idempotency) return invoke;
    const store = this.resolveIdempotencyStore(source, idempotency);
    const timeoutMs = options.timeoutMs ?? this.options.dispatcher.handlerTimeoutMs;
    const ttl = {
      processingTtlMs: idempotency.processingTtlMs ?? timeoutMs + this.options.dispatcher.leaseMs,
      doneTtlMs: idempotency.doneTtlMs ?? 7 * 86_400_000,
    };
    const keyOf = idempotency.key ?? ((event: OutboxEvent) => event.id);
    return async (event, context) => {
      const outcome = await runIdempotent(store, name, keyOf(event), ttl, () =>
        invoke(event, context),
      );
      return outcome.status === 'ran' ? outcome.result : undefined;
    };
  }

  private resolveIdempotencyStore(
    source: string,
    options: OutboxHandlerIdempotencyOptions,
  ): IdempotencyStore {
    const candidate = options.store as Partial<IdempotencyStore> | undefined;
    if (candidate && typeof candidate === 'object' && typeof candidate.claim === 'function') {
      return candidate as IdempotencyStore;
    }
    try {
      return this.moduleRef.get(options.store as never, { strict: false });
    } catch {
      throw new OutboxOptionsError(
        `@OutboxHandler idempotency.store on ${source}`,
        'expected an IdempotencyStore instance or the injection token of a provider of one',
      );
    }
  }
}

function mergeOptions(source: string, all: OutboxHandlerOptions[]): OutboxHandlerOptions {
  const names = new Set(all.map((o) => o.name).filter((n): n is string => n !== undefined));
  if (names.size > 1) {
    throw new OutboxOptionsError(
      `@OutboxHandler name on ${source}`,
      `stacked decorators give different names (${[...names].join(', ')}); use one`,
    );
  }
  const merged: OutboxHandlerOptions = Object.assign({}, ...all);
  for (const [field, value] of [
    ['maxAttempts', merged.maxAttempts],
    ['timeoutMs', merged.timeoutMs],
  ] as const) {
    if (value !== undefined && (!Number.isInteger(value) || value < 1)) {
      throw new OutboxOptionsError(
        `@OutboxHandler ${field} on ${source}`,
        `expected an integer ≥ 1, got ${JSON.stringify(value)}`,
      );
    }
  }
  if (merged.retryIf !== undefined && typeof merged.retryIf !== 'function') {
    throw new OutboxOptionsError(
      `@OutboxHandler retryIf on ${source}`,
      'expected a function (error, attempt) => boolean',
    );
  }
  return merged;
}
