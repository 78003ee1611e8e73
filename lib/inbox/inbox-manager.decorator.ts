import { createParamDecorator } from '@nestjs/common';
import { INBOX_MANAGER_PARAMS_METADATA } from './inbox.constants';
import { currentInboxScope } from './inbox.context';
import { InboxContextError } from '../errors/inbox-context.error';

const managerParam = createParamDecorator((_data: unknown) => {
  // Nest resolves parameters after the interceptors, inside the inbox's async scope.
  const scope = currentInboxScope();
  if (!scope) throw new InboxContextError();
  return scope.manager;
});

/**
 * Injects the inbox transaction's `EntityManager` into an HTTP or microservice handler parameter.
 * Outbox handlers are called with `(event, context)` only; they use the injectable `InboxContext`.
 */
export function InboxManager(): ParameterDecorator {
  return (target, key, index) => {
    if (key !== undefined) {
      const method = (target as Record<string | symbol, unknown>)[key] as object;
      const indexes: number[] = Reflect.getMetadata(INBOX_MANAGER_PARAMS_METADATA, method) ?? [];
      Reflect.defineMetadata(INBOX_MANAGER_PARAMS_METADATA, [...indexes, index], method);
    }
    managerParam()(target, key, index);
  };
}
