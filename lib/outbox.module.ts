import { Logger, Module } from '@nestjs/common';
import { DiscoveryModule, DiscoveryService, ModuleRef } from '@nestjs/core';
import { OutboxDispatcher } from './dispatcher/outbox.dispatcher';
import {
  OutboxModuleOptions,
  ResolvedOutboxOptions,
} from './interfaces/outbox-module-options.interface';
import { OutboxStore } from './interfaces/outbox-store.interface';
import { OUTBOX_RESOLVED_OPTIONS, OUTBOX_STORE } from './outbox.constants';
import { OutboxExplorer } from './outbox.explorer';
import { OutboxHandlerRegistry } from './outbox-handler.registry';
import { OutboxMetadataAccessor } from './outbox-metadata.accessor';
import { OUTBOX_MODULE_OPTIONS, OutboxConfigurableModule } from './outbox.module-definition';
import { resolveOutboxOptions } from './outbox-options';
import { OutboxService } from './outbox.service';
import { OutboxStoreLifecycle } from './outbox-store.lifecycle';
import { createOutboxStore } from './stores/store.factory';
import { InboxContext } from './inbox/inbox.context';
import { InboxService } from './inbox/inbox.service';
import { INBOX_RESOLVED_OPTIONS } from './inbox/inbox.constants';
import { inboxAlongsideStore } from './inbox/inbox-alongside';
import { OUTBOX_TRACING } from './observability/observability.constants';
import { OutboxEvents } from './observability/outbox-events';
import { OutboxHealthIndicator } from './observability/outbox-health.indicator';
import { OutboxLogListener } from './observability/outbox-log.listener';
import { OutboxMetrics } from './observability/outbox-metrics';
import { OutboxTracing } from './observability/outbox-tracing';
import { OutboxListenerExplorer } from './bridges/event-emitter/outbox-listener.explorer';

/**
 * The outbox: `OutboxModule.forRoot(options)` or `forRootAsync({ imports, inject, useFactory })`.
 * The dispatcher registers its poll loop in `@nestjs/schedule`, so import `ScheduleModule.forRoot()`
 * in the app that runs it.
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    {
      provide: OUTBOX_RESOLVED_OPTIONS,
      inject: [OUTBOX_MODULE_OPTIONS],
      useFactory: (options: OutboxModuleOptions) => resolveOutboxOptions(options),
    },
    {
      provide: OUTBOX_STORE,
      inject: [OUTBOX_RESOLVED_OPTIONS, ModuleRef, DiscoveryService],
      useFactory: async (
        options: ResolvedOutboxOptions,
        moduleRef: ModuleRef,
        discovery: DiscoveryService,
      ): Promise<OutboxStore> => {
        const store = await createOutboxStore({
          options,
          moduleRef,
          logger: new Logger('OutboxStore'),
          inboxAlongside: () => inboxAlongsideStore(options, discovery),
        });
        await store.init?.();
        return store;
      },
    },
    {
      provide: INBOX_RESOLVED_OPTIONS,
      inject: [OUTBOX_RESOLVED_OPTIONS],
      useFactory: (options: ResolvedOutboxOptions) => options.inbox,
    },
    {
      // Loads @opentelemetry/api only with the tracing option (docs/monitoring.md).
      provide: OUTBOX_TRACING,
      inject: [OUTBOX_RESOLVED_OPTIONS],
      useFactory: (options: ResolvedOutboxOptions) =>
        options.observability?.tracing ? OutboxTracing.load() : null,
    },
    OutboxEvents,
    OutboxLogListener,
    OutboxMetrics,
    OutboxHealthIndicator,
    OutboxMetadataAccessor,
    OutboxHandlerRegistry,
    OutboxExplorer,
    OutboxListenerExplorer,
    OutboxService,
    OutboxDispatcher,
    OutboxStoreLifecycle,
    InboxService,
    InboxContext,
  ],
  exports: [
    OutboxService,
    OutboxDispatcher,
    OUTBOX_STORE,
    OUTBOX_RESOLVED_OPTIONS,
    OutboxHandlerRegistry,
    InboxService,
    InboxContext,
    OutboxEvents,
    OutboxMetrics,
    OutboxHealthIndicator,
  ],
})
export class OutboxModule extends OutboxConfigurableModule {}
