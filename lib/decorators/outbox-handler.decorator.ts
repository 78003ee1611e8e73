import { SetMetadata } from '@nestjs/common';
import { OUTBOX_HANDLER_METADATA } from '../outbox.constants';
import { OutboxHandlerOptions } from '../interfaces/outbox-handler.interface';

/** Metadata one `@OutboxHandler()` writes; stacked decorators accumulate entries. */
export interface OutboxHandlerMetadata {
  types: string[];
  options: OutboxHandlerOptions;
}

/**
 * Marks a provider method as the handler of one or more event types. The method receives
 * `(event, context)` and runs through Nest's enhancers (guards, interceptors, pipes, filters).
 */
export function OutboxHandler(
  types: string | string[],
  options: OutboxHandlerOptions = {},
): MethodDecorator {
  return (target, propertyKey, descriptor) => {
    const existing: OutboxHandlerMetadata[] =
      Reflect.getMetadata(OUTBOX_HANDLER_METADATA, descriptor.value as object) ?? [];
    const entry: OutboxHandlerMetadata = {
      types: Array.isArray(types) ? [...types] : [types],
      options,
    };
    return SetMetadata(OUTBOX_HANDLER_METADATA, [...existing, entry])(
      target,
      propertyKey,
      descriptor,
    );
  };
}
