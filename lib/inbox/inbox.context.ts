import { Injectable } from '@nestjs/common';
import { AsyncLocalStorage } from 'node:async_hooks';
import type { EntityManager } from 'typeorm';
import { InboxContextError } from '../errors/inbox-context.error';

/** What an `@Inbox()` method runs inside. */
export interface InboxScope {
  /**
   * The inbox transaction's object of its client (TypeORM: the EntityManager; node-postgres: the
   * PoolClient; Drizzle: `tx`; Kysely: the `Transaction`); writes through it commit or roll back
   * with the claim.
   */
  tx: unknown;
  /** The client that opened it, as the executor names it (`TypeORM`, `node-postgres`, …). */
  client: string;
  consumer: string;
  messageId: string;
}

// One store for the whole process: the scope follows the async call chain of the method, so
// services called from it see the same transaction without passing it around.
const storage = new AsyncLocalStorage<InboxScope>();

export function runInInboxScope<T>(scope: InboxScope, fn: () => T): T {
  return storage.run(scope, fn);
}

export function currentInboxScope(): InboxScope | undefined {
  return storage.getStore();
}

/** The running scope, or `InboxContextError` outside an `@Inbox()` method. */
export function requireInboxScope(): InboxScope {
  const scope = storage.getStore();
  if (!scope) throw new InboxContextError();
  return scope;
}

/** The scope's TypeORM EntityManager; an inbox of another client has none (it has `tx`). */
export function inboxManagerOf(scope: InboxScope): EntityManager {
  if (scope.client !== 'TypeORM') throw new InboxContextError(scope.client);
  return scope.tx as EntityManager;
}

/**
 * The running inbox transaction, injectable anywhere: a repository used by an `@Inbox()` method
 * can write through `inboxContext.tx` (TypeORM: `inboxContext.manager`) and join the claim's
 * transaction.
 */
@Injectable()
export class InboxContext {
  /** True while an `@Inbox()` method (or code it awaits) runs. */
  get active(): boolean {
    return storage.getStore() !== undefined;
  }

  /**
   * The transaction's `EntityManager` (TypeORM inbox); throws `InboxContextError` outside an
   * `@Inbox()` method, and for an inbox of another client (use `tx` there).
   */
  get manager(): EntityManager {
    return inboxManagerOf(requireInboxScope());
  }

  /**
   * The transaction object of the inbox's client: TypeORM's EntityManager, node-postgres'
   * PoolClient, Drizzle's `tx`, Kysely's `Transaction`. Type it as your client's:
   * `inboxContext.tx as Transaction<DB>`. Throws `InboxContextError` outside an `@Inbox()` method.
   */
  get tx(): unknown {
    return requireInboxScope().tx;
  }

  get messageId(): string {
    return requireInboxScope().messageId;
  }

  get consumer(): string {
    return requireInboxScope().consumer;
  }
}
