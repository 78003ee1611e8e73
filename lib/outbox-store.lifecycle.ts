import { Inject, Injectable, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { DeferredOutboxStore } from './stores/deferred-outbox.store';
import { OutboxStore } from './interfaces/outbox-store.interface';
import { ResolvedOutboxOptions } from './interfaces/outbox-module-options.interface';
import { OUTBOX_RESOLVED_OPTIONS, OUTBOX_STORE } from './outbox.constants';

/**
 * Opens a deferred store once every provider exists (so bad store options still fail bootstrap),
 * turns on cross-process wake-up signals (`dispatcher.wakeups`, in every process that appends,
 * whether or not its dispatcher runs), and closes what the store opened itself after the
 * dispatcher has drained.
 */
@Injectable()
export class OutboxStoreLifecycle implements OnModuleInit, OnApplicationShutdown {
  constructor(
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    @Inject(OUTBOX_RESOLVED_OPTIONS) private readonly options: ResolvedOutboxOptions,
  ) {}

  async onModuleInit(): Promise<void> {
    if (this.store instanceof DeferredOutboxStore) await this.store.open();
    if (this.options.dispatcher.wakeups) await this.store.publishWakeups?.();
  }

  async onApplicationShutdown(): Promise<void> {
    await this.store.close?.();
  }
}
