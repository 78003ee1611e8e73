import { applyDecorators, SetMetadata, UseInterceptors } from '@nestjs/common';
import { INBOX_METADATA } from './inbox.constants';
import { InboxInterceptor } from './inbox.interceptor';
import { InboxOptions } from './inbox-options.interface';

/**
 * Makes a consumer method apply each message once: the method runs in a transaction that first
 * records `(consumer, messageId)` in the inbox table; a message already recorded skips the method
 * and returns `duplicateResult`. Works on HTTP routes, `@MessagePattern` / `@EventPattern`
 * handlers and `@OutboxHandler` methods. Write through `@InboxTx()` / `InboxContext.tx` (TypeORM:
 * `@InboxManager()` / `InboxContext.manager`).
 */
export function Inbox(options: InboxOptions = {}): MethodDecorator {
  return applyDecorators(SetMetadata(INBOX_METADATA, options), UseInterceptors(InboxInterceptor));
}
