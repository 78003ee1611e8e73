import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-module-options.interface';
import { INBOX_METADATA } from './inbox.constants';
import type { InboxOptions } from './inbox-options.interface';

/**
 * Whether `OutboxModule`'s inbox table lives beside the outbox tables (the store's DataSource or
 * executor, its prefix and schema), is used (`options.inbox` given, or an `@Inbox()` without a
 * DataSource or executor of its own) and is not created by the app (`ensureSchema` off): then one
 * `npx nestjs-outbox schema migrate` (both parts) fixes both tables, and the outbox check says so.
 * Read from the classes, before InboxService looks at the instances.
 */
export function inboxAlongsideStore(
  options: ResolvedOutboxOptions,
  discovery: DiscoveryService,
): boolean {
  const { inbox, store } = options;
  if (!inbox || inbox.ensureSchema) return false;
  if (store.type !== 'typeorm' && store.type !== 'sql') return false;
  const sameClient =
    store.type === 'typeorm'
      ? inbox.executor === undefined &&
        inbox.dataSource === store.dataSource &&
        inbox.dataSourceToken === store.dataSourceToken
      : inbox.dataSource === undefined &&
        inbox.dataSourceToken === undefined &&
        inbox.executor === store.executor;
  if (!sameClient) return false;
  if (inbox.tablePrefix !== (store.tablePrefix ?? 'outbox_') || inbox.schema !== store.schema) {
    return false;
  }
  return inbox.explicit || usesModuleInbox(discovery);
}

function usesModuleInbox(discovery: DiscoveryService): boolean {
  const scanner = new MetadataScanner();
  const reflector = new Reflector();
  for (const wrapper of [...discovery.getControllers(), ...discovery.getProviders()]) {
    const { instance, metatype, inject } = wrapper;
    const prototype: unknown =
      instance && typeof instance === 'object'
        ? Object.getPrototypeOf(instance)
        : !inject && typeof metatype === 'function'
          ? metatype.prototype
          : undefined;
    if (!prototype || typeof prototype !== 'object') continue;
    for (const { options } of inboxMethodsOf(prototype, scanner, reflector)) {
      if (options.dataSource === undefined && options.executor === undefined) return true;
    }
  }
  return false;
}

/** The `@Inbox()` methods of a class prototype, with their options. */
export function* inboxMethodsOf(
  prototype: object,
  scanner: MetadataScanner,
  reflector: Reflector,
): Generator<{ name: string; method: object; options: InboxOptions }> {
  for (const name of scanner.getAllMethodNames(prototype)) {
    const method: unknown = (prototype as Record<string, unknown>)[name];
    if (typeof method !== 'function') continue;
    const options = reflector.get<InboxOptions | undefined>(INBOX_METADATA, method);
    if (options) yield { name, method, options };
  }
}
