import { Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { OutboxOptionsError } from '../errors/outbox-options.error';
import { INBOX_RESOLVED_OPTIONS } from './inbox.constants';
import { InboxContext } from './inbox.context';
import { INBOX_MODULE_OPTIONS, InboxConfigurableModule } from './inbox.module-definition';
import { resolveInboxOptions } from './inbox-options';
import { InboxService } from './inbox.service';

/**
 * `@Inbox()` for services that only consume: `InboxModule.forRoot({ dataSource | dataSourceToken |
 * executor })` or `forRootAsync({ imports, inject, useFactory })`. No outbox store, dispatcher or
 * `@nestjs/schedule` is needed (the retention job runs on its own timer then). An app that also
 * imports `OutboxModule` configures the inbox there (`OutboxModule.forRoot({ inbox })`) instead.
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    {
      provide: INBOX_RESOLVED_OPTIONS,
      inject: [INBOX_MODULE_OPTIONS],
      useFactory: (options: unknown) => {
        try {
          const resolved = resolveInboxOptions(options ?? {}, { type: 'memory' }, '');
          return resolved && { ...resolved, module: 'InboxModule' as const };
        } catch (error) {
          // The options were given here, not as OutboxModule's `inbox`: say so.
          if (!(error instanceof OutboxOptionsError)) throw error;
          throw new OutboxOptionsError(error.field, error.reason, 'InboxModule');
        }
      },
    },
    InboxService,
    InboxContext,
  ],
  exports: [InboxService, InboxContext],
})
export class InboxModule extends InboxConfigurableModule {}
