import {
  Inject,
  Injectable,
  Logger,
  OnApplicationShutdown,
  OnModuleInit,
  Type,
} from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import type { ClientProvider, ClientProxy } from '@nestjs/microservices';
import { OutboxHandler } from '../decorators/outbox-handler.decorator';
import type { OutboxEvent } from '../interfaces/outbox-event.interface';
import type { OutboxHandlerContext } from '../interfaces/outbox-handler.interface';
import { assertInstalled } from '../optional-peers';
import { OutboxRelayOptionsError } from './outbox-relay-options.error';
import type {
  OutboxRelayOptions,
  OutboxRelayStats,
  RelayTransport,
} from './outbox-relay-options.interface';
import { createPublisher, RelayPublisher } from './relay-publishers';
import { RelayPublishTimeoutError } from './relay-publish-timeout.error';

/** Default bound on one publish including its confirmation. */
export const DEFAULT_PUBLISH_TIMEOUT_MS = 10_000;

/**
 * One relay: an outbox handler that publishes each event with a `@nestjs/microservices` client
 * and returns only once the broker confirmed it, so the dispatcher acknowledges the delivery only
 * then (docs/guarantees.md, Guarantees 2: a crash before that re-publishes). Get it with
 * `moduleRef.get(getOutboxRelayToken(name))`.
 */
export abstract class OutboxRelay implements OnModuleInit, OnApplicationShutdown {
  private readonly logger: Logger;
  private client: ClientProxy | null = null;
  private ownClient = false;
  private publisher: RelayPublisher | null = null;
  private kind: RelayTransport | null = null;
  private readonly counters: OutboxRelayStats = {
    published: 0,
    duplicates: 0,
    failed: 0,
    skipped: 0,
  };

  protected constructor(
    readonly options: Readonly<OutboxRelayOptions>,
    private readonly moduleRef: ModuleRef,
  ) {
    this.logger = new Logger(`OutboxRelay(${options.name})`);
  }

  /** Which confirmation the relay uses, known after module init. */
  get transport(): RelayTransport | null {
    return this.kind;
  }

  stats(): OutboxRelayStats {
    return { ...this.counters };
  }

  onModuleInit(): void {
    assertInstalled('OutboxRelayModule', ['@nestjs/microservices']);
    const microservices =
      require('@nestjs/microservices') as typeof import('@nestjs/microservices');
    const { client } = this.options;
    if (isClientOptions(client)) {
      this.client = microservices.ClientProxyFactory.create(
        client as ClientProvider,
      ) as ClientProxy;
      this.ownClient = true;
    } else {
      let found: unknown;
      try {
        found = this.moduleRef.get(client as never, { strict: false });
      } catch {
        found = undefined;
      }
      if (!(found instanceof microservices.ClientProxy)) {
        throw new OutboxRelayOptionsError(
          'client',
          `no ClientProxy is provided under ${String(
            typeof client === 'function' ? client.name : client,
          )}; register it with ClientsModule.register([{ name, transport, options }]) ` +
            'or pass the client options here',
        );
      }
      this.client = found;
    }
    const { transport, publish } = createPublisher(microservices, this.client, {
      mqttQos: this.options.mqttQos ?? 1,
      cloudEvents: this.options.cloudEvents,
    });
    this.kind = transport;
    this.publisher = publish;
    if (transport === 'other') {
      this.logger.warn(
        `${this.client.constructor.name} has no known broker confirmation; deliveries are ` +
          'acknowledged when its emit() settles (see docs/relay-and-scaling.md, "Relay to a broker")',
      );
    }
  }

  async onApplicationShutdown(): Promise<void> {
    // The dispatcher has drained in-flight deliveries (beforeApplicationShutdown) by now.
    if (this.ownClient) await this.client?.close();
  }

  /** Publishes one event and resolves once the broker confirmed it. */
  async relay(event: OutboxEvent, _context?: OutboxHandlerContext): Promise<void> {
    if (this.options.filter && !this.options.filter(event)) {
      this.counters.skipped++;
      return;
    }
    const timeoutMs = this.options.publishTimeoutMs ?? DEFAULT_PUBLISH_TIMEOUT_MS;
    try {
      const { duplicate } = await withTimeout(
        this.publisher!({
          pattern: this.options.pattern ? this.options.pattern(event) : event.type,
          event,
          timeoutMs,
        }),
        timeoutMs,
        () => new RelayPublishTimeoutError(this.options.name, event.id, timeoutMs),
      );
      this.counters.published++;
      if (duplicate) this.counters.duplicates++;
    } catch (error) {
      this.counters.failed++;
      // Nest's ClientRMQ rejects with a bare string while it reconnects.
      throw error instanceof Error ? error : new Error(String(error));
    }
  }
}

/** Injection token of the relay registered under `name`. */
export function getOutboxRelayToken(name: string): string {
  return `OutboxRelay:${name}`;
}

/** A class per registration: its `relay` method carries this relay's `@OutboxHandler` metadata. */
export function createRelayClass(options: OutboxRelayOptions): Type<OutboxRelay> {
  @Injectable()
  class RegisteredOutboxRelay extends OutboxRelay {
    constructor(@Inject(ModuleRef) moduleRef: ModuleRef) {
      super(options, moduleRef);
    }

    override relay(event: OutboxEvent, context?: OutboxHandlerContext): Promise<void> {
      return super.relay(event, context);
    }
  }
  const descriptor = Object.getOwnPropertyDescriptor(RegisteredOutboxRelay.prototype, 'relay')!;
  OutboxHandler(options.types, {
    name: options.name,
    maxAttempts: options.maxAttempts,
    backoff: options.backoff,
    timeoutMs: options.timeoutMs,
  })(RegisteredOutboxRelay.prototype, 'relay', descriptor);
  return RegisteredOutboxRelay;
}

function isClientOptions(client: OutboxRelayOptions['client']): boolean {
  return (
    typeof client === 'object' &&
    client !== null &&
    ('transport' in client || 'customClass' in client)
  );
}

function withTimeout<T>(promise: Promise<T>, ms: number, error: () => Error): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(error()), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
