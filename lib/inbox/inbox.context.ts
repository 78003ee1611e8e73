import { Injectable } from '@nestjs/common';
import { AsyncLocalStorage } from 'node:async_hooks';
import type { EntityManager } from 'typeorm';
import { InboxContextError } from '../errors/inbox-context.error';

/** What an `@Inbox()` method runs inside. */
export interface InboxScope {
  /** The inbox transaction's manager; writes through it commit or roll back with the claim. */
  manager: EntityManager;
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

/**
 * The running inbox transaction, injectable anywhere: a repository used by an `@Inbox()` method
 * can write through `inboxContext.manager` and join the claim's transaction.
 */
@Injectable()
export class InboxContext {
  /** True while an `@Inbox()` method (or code it awaits) runs. */
  get active(): boolean {
    return storage.getStore() !== undefined;
  }

  /** The transaction's `EntityManager`; throws `InboxContextError` outside an `@Inbox()` method. */
  get manager(): EntityManager {
    return this.scope.manager;
  }

  get messageId(): string {
    return this.scope.messageId;
  }

  get consumer(): string {
    return this.scope.consumer;
  }

  private get scope(): InboxScope {
    const scope = storage.getStore();
    if (!scope) throw new InboxContextError();
    return scope;
  }
}
