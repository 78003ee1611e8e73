import { createParamDecorator } from '@nestjs/common';
import { INBOX_MANAGER_PARAMS_METADATA, INBOX_TX_PARAMS_METADATA } from './inbox.constants';
import { inboxManagerOf, requireInboxScope } from './inbox.context';

// Nest resolves parameters after the interceptors, inside the inbox's async scope.
const managerParam = createParamDecorator((_data: unknown) => inboxManagerOf(requireInboxScope()));
const txParam = createParamDecorator((_data: unknown) => requireInboxScope().tx);

/**
 * A parameter decorator that also lists its index under `metadataKey` on the method, so the
 * inbox can refuse it where it cannot work (outbox handlers).
 */
function inboxParam(metadataKey: string, param: () => ParameterDecorator): ParameterDecorator {
  return (target, key, index) => {
    if (key !== undefined) {
      const method = (target as Record<string | symbol, unknown>)[key] as object;
      const indexes: number[] = Reflect.getMetadata(metadataKey, method) ?? [];
      Reflect.defineMetadata(metadataKey, [...indexes, index], method);
    }
    param()(target, key, index);
  };
}

/**
 * Injects the inbox transaction's `EntityManager` into an HTTP or microservice handler parameter
 * (TypeORM inbox; for another client use `@InboxTx()`). Outbox handlers are called with
 * `(event, context)` only; they use the injectable `InboxContext`.
 */
export function InboxManager(): ParameterDecorator {
  return inboxParam(INBOX_MANAGER_PARAMS_METADATA, managerParam);
}

/**
 * Injects the inbox transaction's object of its client into an HTTP or microservice handler
 * parameter: node-postgres' `PoolClient`, Drizzle's `tx`, Kysely's `Transaction`, TypeORM's
 * `EntityManager`. Writes through it commit or roll back with the inbox record. Outbox handlers
 * use `InboxContext.tx`.
 */
export function InboxTx(): ParameterDecorator {
  return inboxParam(INBOX_TX_PARAMS_METADATA, txParam);
}
