import { assignMetadata, PipeTransform, Type } from '@nestjs/common';
import { ROUTE_ARGS_METADATA } from '@nestjs/common/constants';
import { OutboxParamtype } from '../outbox.constants';

/**
 * Marks the parameter of an `@OutboxHandler()` method that receives the event, with pipes that run
 * on it alone (after `@UsePipes` and global pipes). Without it the event is the first argument
 * and the handler context the second. Recorded under Nest's route-arguments key (as
 * `@nestjs/microservices`' `@Payload()` is), so Nest instantiates pipe classes given here.
 */
export function HandledEvent(
  ...pipes: (Type<PipeTransform> | PipeTransform)[]
): ParameterDecorator {
  return (target, propertyKey, index) => {
    if (propertyKey === undefined) return;
    const args = Reflect.getMetadata(ROUTE_ARGS_METADATA, target.constructor, propertyKey) ?? {};
    Reflect.defineMetadata(
      ROUTE_ARGS_METADATA,
      assignMetadata(args, OutboxParamtype.EVENT, index, undefined, ...pipes),
      target.constructor,
      propertyKey,
    );
  };
}
