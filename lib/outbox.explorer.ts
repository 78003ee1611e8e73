import { assignMetadata, Inject, Injectable, Logger, OnModuleInit } from '@nestjs/common';
import { ROUTE_ARGS_METADATA } from '@nestjs/common/constants';
import { DiscoveryService, MetadataScanner, ModuleRef } from '@nestjs/core';
import { ExternalExceptionFilterContext } from '@nestjs/core/exceptions/external-exception-filter-context';
import type { ExternalExceptionsHandler } from '@nestjs/core/exceptions/external-exceptions-handler';
import { GuardsContextCreator } from '@nestjs/core/guards/guards-context-creator';
import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host';
import { InterceptorsContextCreator } from '@nestjs/core/interceptors/interceptors-context-creator';
import { PipesContextCreator } from '@nestjs/core/pipes/pipes-context-creator';
import { isObservable, lastValueFrom } from 'rxjs';
import {
  ExternalContextCreator,
  ParamsFactory,
} from '@nestjs/core/helpers/external-context-creator';
import type { NestContainer } from '@nestjs/core/injector/container';
import type { RouterProxyCallback } from '@nestjs/core/router/router-proxy';
import { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper';
import { OutboxOptionsError } from './errors/outbox-options.error';
import { IdempotencyStore } from './idempotency/idempotency-store.interface';
import { runIdempotent } from './idempotency/run-idempotent';
import { OutboxEvent } from './interfaces/outbox-event.interface';
import {
  OutboxBatchContext,
  OutboxBatchOptions,
  OutboxHandlerContext,
  OutboxHandlerIdempotencyOptions,
  OutboxHandlerOptions,
} from './interfaces/outbox-handler.interface';
import { ResolvedOutboxOptions } from './interfaces/outbox-module-options.interface';
import {
  OUTBOX_ARGS_METADATA,
  OUTBOX_CONTEXT_TYPE,
  OUTBOX_RESOLVED_OPTIONS,
  OutboxParamtype,
  UNEXPANDED_HANDLER,
} from './outbox.constants';
import { OutboxHandlerRegistry, RegisteredBatch } from './outbox-handler.registry';
import { OutboxMetadataAccessor } from './outbox-metadata.accessor';
import { OutboxMessages } from './outbox.messages';
import { resolveBackoff } from './outbox-options';
import { unstorableText } from './outbox-validation';
import { OptionKeys, refuseUnknownKeys, shown } from './option-fields';

const TYPE_PATTERN = /^[A-Za-z0-9._:-]{1,255}$/;

/** Most events one batch handler call may receive. */
export const BATCH_MAX_LIMIT = 1000;

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
      if (
        typeof name !== 'string' ||
        name === UNEXPANDED_HANDLER ||
        name.length > 255 ||
        name.length === 0
      ) {
        throw new OutboxOptionsError(
          `@OutboxHandler name on ${source}`,
          'must be 1–255 characters and not "*"',
        );
      }
      // The name is stored with every delivery: it must be the same text on every store.
      const fault = unstorableText(name);
      if (fault) throw new OutboxOptionsError(`@OutboxHandler name on ${source}`, fault);
      if (options.batch !== undefined && this.accessor.hasInbox(prototype[methodName])) {
        throw new OutboxOptionsError(
          `@OutboxHandler batch on ${source}`,
          '@Inbox() records one message per call and cannot apply a batch; use a handler without ' +
            '`batch`, or record the events in your own transaction inside the batch handler',
        );
      }
      const invoke = this.createInvoker(instance, prototype[methodName], methodName);
      const batch: RegisteredBatch | undefined = options.batch && {
        max: options.batch.max,
        // The same pipeline: Nest's enhancers see `[events, batchContext]` as the arguments.
        invoke: invoke as unknown as RegisteredBatch['invoke'],
      };
      this.registry.register({
        name,
        types,
        source,
        maxAttempts: options.maxAttempts,
        backoff:
          options.backoff === undefined
            ? undefined
            : resolveBackoff(
                '@OutboxHandler backoff',
                options.backoff,
                this.options.dispatcher.backoff,
                ` on ${source}`,
              ),
        timeoutMs: options.timeoutMs,
        retryIf: options.retryIf,
        invoke: batch
          ? (event, context) => batch.invoke([event], batchContextOf(context))
          : this.withIdempotency(name, source, options, invoke),
        ...(batch ? { batch } : {}),
      });
    }
  }

  /**
   * Runs the method through Nest's guards, interceptors, pipes and exception filters under the
   * `'outbox'` context type (or calls it directly when none of the first three applies, see
   * `directCall`). Filters are applied here rather than by `ExternalContextCreator`:
   * its fallback for an error no filter handles logs it as an ERROR (`ExceptionsHandler`) before
   * rethrowing, and the dispatcher already logs every failure once, as a warning when it retries.
   */
  private createInvoker(
    instance: object,
    method: (...args: unknown[]) => unknown,
    methodName: string,
  ): (event: OutboxEvent, context: OutboxHandlerContext) => Promise<unknown> {
    ensureArgsMetadata(instance, methodName);
    const host = this.enhancerHost(instance);
    const filters = host && this.exceptionFilters(host, instance, method);
    const call =
      (host && this.directCall(host, instance, method, methodName)) ??
      this.contextCreator.create(
        instance,
        method,
        methodName,
        OUTBOX_ARGS_METADATA,
        OUTBOX_PARAMS_FACTORY,
        undefined,
        undefined,
        { guards: true, interceptors: true, filters: !filters },
        OUTBOX_CONTEXT_TYPE,
      );
    if (!filters) return call;
    return async (event, context) => {
      try {
        return await call(event, context);
      } catch (error) {
        const argsHost = new ExecutionContextHost([event, context]);
        argsHost.setType(OUTBOX_CONTEXT_TYPE);
        // As Nest's own handler does: a filter's result stands, no result rethrows the error.
        const handled = filters.invokeCustomFilters(error, argsHost);
        if (!handled) throw error;
        return await handled;
      }
    };
  }

  /**
   * The method itself when no guard, interceptor or pipe applies to it (none global, on its class,
   * on it or on its parameters): Nest's pipeline would only hand the arguments through, at ~2.8 KB
   * of promises and closures per call, a third of a delivery's allocations (bench/RESULTS.md,
   * run 7). The arguments are placed as Nest places them, and an Observable result is awaited as
   * Nest does. `null` when something applies: the handler then runs through Nest's pipeline.
   */
  private directCall(
    { container, moduleKey }: EnhancerHost,
    instance: object,
    method: (...args: unknown[]) => unknown,
    methodName: string,
  ): ((event: OutboxEvent, context: OutboxHandlerContext) => Promise<unknown>) | null {
    const config = container.applicationConfig;
    const enhancers = [
      new GuardsContextCreator(container, config),
      new InterceptorsContextCreator(container, config),
      new PipesContextCreator(container, config),
    ];
    if (enhancers.some((c) => c.create(instance, method, moduleKey).length > 0)) return null;
    const args: Record<string, { index: number; pipes?: unknown[] }> =
      Reflect.getMetadata(OUTBOX_ARGS_METADATA, instance.constructor, methodName) ?? {};
    let eventAt = -1;
    let contextAt = -1;
    for (const [key, arg] of Object.entries(args)) {
      if ((arg.pipes?.length ?? 0) > 0) return null;
      const type = Number(key.split(':')[0]);
      if (type === OutboxParamtype.EVENT) eventAt = arg.index;
      else if (type === OutboxParamtype.CONTEXT) contextAt = arg.index;
      else return null;
    }
    const settle = (result: unknown) => (isObservable(result) ? lastValueFrom(result) : result);
    if (eventAt === 0 && contextAt === 1) {
      return async (event, context) => settle(await method.call(instance, event, context));
    }
    const length = Math.max(eventAt, contextAt) + 1;
    return async (event, context) => {
      const list: unknown[] = new Array(length).fill(undefined);
      if (eventAt >= 0) list[eventAt] = event;
      if (contextAt >= 0) list[contextAt] = context;
      return settle(await method.apply(instance, list));
    };
  }

  /**
   * Nest's container and the handler's module, to resolve its enhancers from. `null` if this Nest
   * version does not expose its container on `ExternalContextCreator`: then Nest applies every
   * enhancer itself, filters included (with their fallback log).
   */
  private enhancerHost(instance: object): EnhancerHost | null {
    const container = (this.contextCreator as unknown as { container?: NestContainer }).container;
    if (!container) return null;
    return { container, moduleKey: this.contextCreator.getContextModuleKey(instance.constructor) };
  }

  /** The method's, class's and global exception filters, without Nest's logging fallback. */
  private exceptionFilters(
    { container, moduleKey }: EnhancerHost,
    instance: object,
    method: (...args: unknown[]) => unknown,
  ): ExternalExceptionsHandler {
    return new ExternalExceptionFilterContext(container, container.applicationConfig).create(
      instance,
      // Only read for its filter metadata, never called.
      method as RouterProxyCallback,
      moduleKey,
    );
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

/** Nest's container and the module a handler's class belongs to. */
interface EnhancerHost {
  container: NestContainer;
  moduleKey: string;
}

/** Hands the event and the handler context to the method's parameters, by index. */
const OUTBOX_PARAMS_FACTORY: ParamsFactory = {
  exchangeKeyForValue: (type: number, _data: unknown, args: unknown[]) => args[type],
};

/**
 * Pipes run only on listed parameters, so the handler's parameter list is written under the
 * library's own key: the event where `@HandledEvent()` put it (it records under Nest's route-args
 * key, so Nest instantiates the pipe classes it names), else first, then the context.
 */
function ensureArgsMetadata(instance: object, methodName: string): void {
  const host = instance.constructor;
  const declared: Record<string, { index: number }> =
    Reflect.getMetadata(ROUTE_ARGS_METADATA, host, methodName) ?? {};
  let args: Record<string, { index: number }> = Object.fromEntries(
    Object.entries(declared).filter(([key]) => key.startsWith(`${OutboxParamtype.EVENT}:`)),
  );
  const taken = new Set(Object.values(args).map((a) => a.index));
  const free = [0, 1].filter((i) => !taken.has(i));
  if (taken.size === 0) args = assignMetadata(args, OutboxParamtype.EVENT, free.shift()!);
  if (free.length > 0) args = assignMetadata(args, OutboxParamtype.CONTEXT, free[0]);
  Reflect.defineMetadata(OUTBOX_ARGS_METADATA, args, host, methodName);
}

const HANDLER_KEYS = {
  name: true,
  maxAttempts: true,
  backoff: true,
  timeoutMs: true,
  retryIf: true,
  idempotency: true,
  batch: true,
} satisfies OptionKeys<OutboxHandlerOptions>;

const BATCH_KEYS = { max: true } satisfies OptionKeys<OutboxBatchOptions>;

const IDEMPOTENCY_KEYS = {
  store: true,
  key: true,
  processingTtlMs: true,
  doneTtlMs: true,
} satisfies OptionKeys<OutboxHandlerIdempotencyOptions>;

/** Validates and merges the options of stacked decorators on `source` (also `@OutboxListener()`). */
export function mergeOptions(source: string, all: OutboxHandlerOptions[]): OutboxHandlerOptions {
  const names = new Set(all.map((o) => o.name).filter((n): n is string => n !== undefined));
  if (names.size > 1) {
    throw new OutboxOptionsError(
      `@OutboxHandler name on ${source}`,
      `stacked decorators give different names (${[...names].join(', ')}); use one`,
    );
  }
  const refuse = (field: string, reason: string) =>
    new OutboxOptionsError(`@OutboxHandler ${field} on ${source}`, reason);
  for (const options of all) {
    if (typeof options !== 'object' || options === null) {
      throw refuse('options', `expected an object, got ${JSON.stringify(options)}`);
    }
    refuseUnknownKeys('', options, HANDLER_KEYS, refuse);
    if (typeof options.idempotency === 'object' && options.idempotency !== null) {
      refuseUnknownKeys('idempotency', options.idempotency, IDEMPOTENCY_KEYS, refuse);
    }
    if (options.batch !== undefined) {
      if (typeof options.batch !== 'object' || options.batch === null) {
        throw refuse('batch', `expected { max: number }, got ${JSON.stringify(options.batch)}`);
      }
      refuseUnknownKeys('batch', options.batch, BATCH_KEYS, refuse);
      const { max } = options.batch;
      if (!Number.isInteger(max) || max < 1 || max > BATCH_MAX_LIMIT) {
        throw refuse(
          'batch.max',
          `expected an integer from 1 to ${BATCH_MAX_LIMIT}, got ${shown(max)}`,
        );
      }
    }
  }
  const merged: OutboxHandlerOptions = Object.assign({}, ...all);
  for (const [field, value] of [
    ['maxAttempts', merged.maxAttempts],
    ['timeoutMs', merged.timeoutMs],
  ] as const) {
    if (value !== undefined && (!Number.isInteger(value) || value < 1)) {
      throw new OutboxOptionsError(
        `@OutboxHandler ${field} on ${source}`,
        `expected an integer ≥ 1, got ${shown(value)}`,
      );
    }
  }
  if (merged.batch !== undefined && merged.idempotency !== undefined) {
    throw new OutboxOptionsError(
      `@OutboxHandler batch on ${source}`,
      'cannot be combined with `idempotency`, which suppresses duplicates one event per call; ' +
        'check your idempotency keys inside the batch handler',
    );
  }
  if (merged.retryIf !== undefined && typeof merged.retryIf !== 'function') {
    throw new OutboxOptionsError(
      `@OutboxHandler retryIf on ${source}`,
      'expected a function (error, attempt) => boolean',
    );
  }
  return merged;
}

/** A one-event batch's context, for a batch handler called through `RegisteredHandler.invoke`. */
function batchContextOf(context: OutboxHandlerContext): OutboxBatchContext {
  return {
    get signal() {
      return context.signal;
    },
    workerId: context.workerId,
    handler: context.handler,
    deliveries: [{ deliveryId: context.deliveryId, attempt: context.attempt }],
  };
}
