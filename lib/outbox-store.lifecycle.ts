import { Inject, Injectable, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { DeferredOutboxStore } from './stores/deferred-outbox.store';
import { OutboxStore } from './interfaces/outbox-store.interface';
import { OUTBOX_STORE } from './outbox.constants';

/**
 * Opens a deferred store once every provider exists (so bad store options still fail bootstrap),
 * and closes what the store opened itself after the dispatcher has drained.
 */
@Injectable()
export class OutboxStoreLifecycle implements OnModuleInit, OnApplicationShutdown {
  constructor(@Inject(OUTBOX_STORE) private readonly store: OutboxStore) {}

  async onModuleInit(): Promise<void> {
    if (this.store instanceof DeferredOutboxStore) await this.store.open();
  }

  async onApplicationShutdown(): Promise<void> {
    await this.store.close?.();
  }
}
