import { Module } from '@nestjs/common';
import { OutboxAdminModuleOptions } from './outbox-admin-options.interface';
import { resolveOutboxAdminOptions } from './outbox-admin-options';
import { OUTBOX_ADMIN_RESOLVED_OPTIONS } from './outbox-admin.constants';
import {
  OUTBOX_ADMIN_MODULE_OPTIONS,
  OutboxAdminConfigurableModule,
} from './outbox-admin.module-definition';
import { OutboxAdminService } from './outbox-admin.service';
import { OutboxAdminThroughput } from './outbox-admin-throughput';

/**
 * HTTP routes for dead letters and stats: `OutboxAdminModule.register({ guards: [ApiKeyGuard] })`
 * or `registerAsync({ imports, inject, useFactory })`. Routes sit under `path` (default `outbox`),
 * below any `RouterModule` prefix. It uses the store of the app's `OutboxModule`, found at
 * bootstrap whether or not that module is global. Registering without guards fails bootstrap
 * unless `allowUnauthenticated: true` is set. With `ui: true` it also serves the dashboard page at
 * `<path>/ui`, behind the same guards.
 */
@Module({
  providers: [
    {
      provide: OUTBOX_ADMIN_RESOLVED_OPTIONS,
      inject: [OUTBOX_ADMIN_MODULE_OPTIONS],
      useFactory: (options: OutboxAdminModuleOptions) => resolveOutboxAdminOptions(options),
    },
    OutboxAdminService,
    OutboxAdminThroughput,
  ],
})
export class OutboxAdminModule extends OutboxAdminConfigurableModule {}
