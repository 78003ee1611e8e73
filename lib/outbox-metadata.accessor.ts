import { Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { OUTBOX_HANDLER_METADATA } from './outbox.constants';
import { OutboxHandlerMetadata } from './decorators/outbox-handler.decorator';
import { INBOX_METADATA } from './inbox/inbox.constants';

/** The one place that reads `@OutboxHandler()` metadata. */
@Injectable()
export class OutboxMetadataAccessor {
  constructor(private readonly reflector: Reflector) {}

  getHandlerMetadata(method: Function): OutboxHandlerMetadata[] | undefined {
    return this.reflector.get<OutboxHandlerMetadata[] | undefined>(OUTBOX_HANDLER_METADATA, method);
  }

  /** Whether `@Inbox()` decorates the method. */
  hasInbox(method: Function): boolean {
    return this.reflector.get(INBOX_METADATA, method) !== undefined;
  }
}
