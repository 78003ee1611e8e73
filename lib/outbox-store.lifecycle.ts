import { Inject, Injectable, OnApplicationShutdown } from '@nestjs/common';
import { OutboxStore } from './interfaces/outbox-store.interface';
import { OUTBOX_STORE } from './outbox.constants';

/** Closes what the store opened itself, after the dispatcher has drained. */
@Injectable()
export class OutboxStoreLifecycle implements OnApplicationShutdown {
  constructor(@Inject(OUTBOX_STORE) private readonly store: OutboxStore) {}

  async onApplicationShutdown(): Promise<void> {
    await this.store.close?.();
  }
}
