import { Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { OUTBOX_HANDLER_METADATA } from './outbox.constants';
import { OutboxHandlerMetadata } from './decorators/outbox-handler.decorator';

/** The one place that reads `@OutboxHandler()` metadata. */
@Injectable()
export class OutboxMetadataAccessor {
  constructor(private readonly reflector: Reflector) {}

  getHandlerMetadata(method: Function): OutboxHandlerMetadata[] | undefined {
    return this.reflector.get<OutboxHandlerMetadata[] | undefined>(OUTBOX_HANDLER_METADATA, method);
  }
}
