import { Injectable } from '@nestjs/common';
import { OutboxOptionsError } from './errors/outbox-options.error';
import { OutboxEvent } from './interfaces/outbox-event.interface';
import {
  OutboxBatchContext,
  OutboxHandlerContext,
  OutboxHandlerOptions,
} from './interfaces/outbox-handler.interface';
import { BackoffOptions } from './interfaces/outbox-module-options.interface';
import { HandlerSubscription } from './interfaces/outbox-store.interface';

export interface RegisteredHandler {
  name: string;
  types: string[];
  maxAttempts?: number;
  backoff?: BackoffOptions;
  timeoutMs?: number;
  retryIf?: OutboxHandlerOptions['retryIf'];
  /** Calls the method through Nest's enhancer pipeline (a batch handler: with one event). */
  invoke: (event: OutboxEvent, context: OutboxHandlerContext) => Promise<unknown>;
  /** Set for a batch handler: the method is called with arrays of at most `max` events. */
  batch?: RegisteredBatch;
  /** `Class.method`, for messages. */
  source: string;
}

export interface RegisteredBatch {
  max: number;
  /** Calls the method with a batch through Nest's enhancer pipeline. */
  invoke: (events: OutboxEvent[], context: OutboxBatchContext) => Promise<unknown>;
}

/** Handlers discovered at bootstrap, by name and by event type. */
@Injectable()
export class OutboxHandlerRegistry {
  private readonly byName = new Map<string, RegisteredHandler>();
  private readonly byType = new Map<string, string[]>();
  /** Built once: every claim asks for it, and handlers only register at bootstrap. */
  private subscriptionList: HandlerSubscription[] | null = null;

  register(handler: RegisteredHandler): void {
    const existing = this.byName.get(handler.name);
    if (existing) {
      throw new OutboxOptionsError(
        `@OutboxHandler name "${handler.name}"`,
        `used by both ${existing.source} and ${handler.source}; handler names must be unique ` +
          `(set { name: '...' } on one of them)`,
      );
    }
    this.byName.set(handler.name, handler);
    this.subscriptionList = null;
    for (const type of handler.types)
      this.byType.set(type, [...(this.byType.get(type) ?? []), handler.name]);
  }

  get(name: string): RegisteredHandler | undefined {
    return this.byName.get(name);
  }

  all(): RegisteredHandler[] {
    return [...this.byName.values()];
  }

  handlerNamesFor(type: string): string[] {
    return this.byType.get(type) ?? [];
  }

  subscriptions(): HandlerSubscription[] {
    this.subscriptionList ??= this.all().map((h) => ({ name: h.name, types: h.types }));
    return this.subscriptionList;
  }
}
