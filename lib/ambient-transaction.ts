import { DiscoveryService, type ModuleRef } from '@nestjs/core';
import type { SqlExecutor } from './executors/sql-executor';
import { currentInboxScope } from './inbox/inbox.context';

/** The parts of `@nestjs-cls/transactional`'s `TransactionHost` used here. */
interface TransactionHostLike {
  readonly tx: unknown;
  isTransactionActive(): boolean;
}

/** Where `append()` without `manager` found an open transaction to join. */
export interface AmbientTransaction {
  /**
   * The transaction object of its client (TypeORM: an EntityManager): `append()` passes it as
   * `manager` to a TypeORM store, as `tx` to the 'sql' store.
   */
  tx: unknown;
  /** Named in errors: `@Transactional()` or `@Inbox()`. */
  source: string;
}

/**
 * Finds the ambient transactions `OutboxService.append()` joins and `@Inbox()` publishes:
 * `@nestjs-cls/transactional`'s `TransactionHost` (an optional peer, looked up only when an append
 * or an inbox run asks and the app has loaded the package, and only used when the app registered
 * `ClsPluginTransactional`), then the
 * `@Inbox()` transaction of the calling code.
 */
export class AmbientTransactions {
  private host: TransactionHostLike | null | undefined;

  constructor(private readonly moduleRef: ModuleRef) {}

  /** The transaction `append()` without a manager must join, or null when there is none. */
  current(): AmbientTransaction | null {
    const host = this.transactionHost();
    if (host?.isTransactionActive()) return { tx: host.tx, source: '@Transactional()' };
    const inbox = currentInboxScope();
    if (inbox) return { tx: inbox.tx, source: '@Inbox()' };
    return null;
  }

  /**
   * Runs `fn` with `tx` (the inbox transaction's object of `executor`'s client) as
   * `TransactionHost`'s active transaction, so `@Transactional()` methods (Propagation.Required)
   * and `txHost.tx` inside an `@Inbox()` method write in the inbox transaction. Only when the
   * host's adapter works on the inbox's client (`executor.ownsClient(host.tx)`: its DataSource,
   * Pool, Drizzle db, Kysely instance): a host for another database keeps its own transactions.
   */
  runAsAmbient<T>(tx: unknown, executor: SqlExecutor, fn: () => Promise<T>): Promise<T> {
    const host = this.transactionHost() as
      (TransactionHostLike & { setTxInstance?: (tx: unknown) => void }) | null;
    if (!host || host.isTransactionActive()) return fn();
    if (!executor.ownsClient(host.tx)) return fn();
    // TransactionHost has no public "join this transaction"; this is what its own
    // runWithTransaction does (a nested CLS context holding the transaction). Tested against the
    // supported @nestjs-cls/transactional versions; a version without it keeps the old behaviour.
    const setTxInstance = host.setTxInstance;
    if (typeof setTxInstance !== 'function') return fn();
    const { ClsServiceManager } = require('nestjs-cls') as typeof import('nestjs-cls');
    return ClsServiceManager.getClsService().run({ ifNested: 'inherit' }, () => {
      setTxInstance.call(host, tx);
      return fn().finally(() => setTxInstance.call(host, undefined));
    });
  }

  private transactionHost(): TransactionHostLike | null {
    if (this.host !== undefined) return this.host;
    let token: unknown;
    try {
      // Only when the app itself loaded the package: an app that registered
      // ClsPluginTransactional has, by then. Loading it here for an app that did not would turn on
      // nestjs-cls's AsyncLocalStorage, which puts async hooks on every promise of the process.
      const path = require.resolve('@nestjs-cls/transactional');
      if (require.cache[path]) {
        token = (require(path) as typeof import('@nestjs-cls/transactional')).TransactionHost;
      }
    } catch {
      // Not installed here (or its peer nestjs-cls is missing), or bundled into the app.
    }
    // A copy this module cannot see in require.cache (an app bundle, an isolated module
    // registry): found by its class among the app's providers, so a @Transactional() transaction
    // is never missed (appending outside it would commit the event on its own).
    this.host = token ? this.hostByToken(token) : this.hostByClassName();
    return this.host;
  }

  private hostByToken(token: unknown): TransactionHostLike | null {
    try {
      return this.moduleRef.get(token as never, { strict: false }) as TransactionHostLike;
    } catch {
      // Installed but the app did not register ClsPluginTransactional.
      return null;
    }
  }

  /** The default `TransactionHost` provider (its class is its token), if the app has one. */
  private hostByClassName(): TransactionHostLike | null {
    let discovery: DiscoveryService;
    try {
      discovery = this.moduleRef.get(DiscoveryService, { strict: false });
    } catch {
      return null;
    }
    for (const wrapper of discovery.getProviders()) {
      const type = wrapper.metatype as { name?: string } | null | undefined;
      const host = wrapper.instance as Partial<TransactionHostLike> | undefined;
      if (
        type?.name === 'TransactionHost' &&
        wrapper.token === type &&
        host &&
        typeof host.isTransactionActive === 'function'
      ) {
        return host as TransactionHostLike;
      }
    }
    return null;
  }
}
