import type { Logger } from '@nestjs/common';
import type { ModuleRef } from '@nestjs/core';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-module-options.interface';

/**
 * What a store factory may use: the resolved options and a way to look up app providers. Its own
 * file, so the store factories (loaded lazily by `store.factory.ts`) do not import the module that
 * loads them.
 */
export interface StoreFactoryContext {
  options: ResolvedOutboxOptions;
  moduleRef: ModuleRef;
  logger: Logger;
  /**
   * Whether the module's inbox table is beside the outbox tables and must be migrated with them
   * (`inboxAlongsideStore`): the schema check then names the command that migrates both.
   */
  inboxAlongside?: () => boolean;
}
