import { Inject, Injectable } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import type { HealthIndicatorService } from '@nestjs/terminus';
import type { DataSource } from 'typeorm';
import { OutboxStore, OutboxStoreStats } from '../interfaces/outbox-store.interface';
import { OUTBOX_STORE } from '../outbox.constants';
import { assertInstalled } from '../optional-peers';
import type { OutboxSchemaStatus } from '../stores/typeorm/schema/schema';

/** Thresholds of `OutboxHealthIndicator.isHealthy()`. */
export interface OutboxHealthOptions {
  /** A store that has not answered within this long is down. @default 3000 */
  timeoutMs?: number;
  /** Down when the oldest due pending delivery is older than this. @default 300000 (5 min) */
  maxOldestPendingAgeMs?: number;
  /**
   * Down when there are more dead letters than this. Dead letters wait for a person, not for a
   * restart: keep this indicator off liveness probes. @default Infinity (not checked)
   */
  maxDeadLetters?: number;
}

/** What the indicator reports under its key, up or down. */
export type OutboxHealthDetails = {
  /** Why it is down; empty when up. */
  reasons: string[];
  pending?: number;
  dead?: number;
  oldestPendingAgeMs?: number;
  /** SQL stores: the schema version found and expected. */
  schema?: { current: number | null; expected: number };
};

/** The indicator's result: terminus's `HealthIndicatorResult`, spelled without its types. */
export type OutboxHealthResult<Key extends string = 'outbox'> = Record<
  Key,
  OutboxHealthDetails & { status: 'up' | 'down' }
>;

/**
 * A `@nestjs/terminus` health indicator (optional peer, current `HealthIndicatorService` API):
 * down when the store does not answer within `timeoutMs`, when the SQL schema is missing or
 * behind, when the oldest pending delivery is older than `maxOldestPendingAgeMs`, or when dead
 * letters exceed `maxDeadLetters`; every reason is listed in `reasons`. One `store.stats()` call
 * (and, on SQL stores, one schema read) per check.
 */
@Injectable()
export class OutboxHealthIndicator {
  private service: HealthIndicatorService | null = null;

  constructor(
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    private readonly moduleRef: ModuleRef,
  ) {}

  async isHealthy<const Key extends string = 'outbox'>(
    key: Key = 'outbox' as Key,
    options: OutboxHealthOptions = {},
  ): Promise<OutboxHealthResult<Key>> {
    const session = this.health().check(key);
    const timeoutMs = options.timeoutMs ?? 3_000;
    const maxAge = options.maxOldestPendingAgeMs ?? 300_000;
    const maxDead = options.maxDeadLetters ?? Infinity;
    const details: OutboxHealthDetails = { reasons: [] };
    let stats: OutboxStoreStats;
    let schema: OutboxSchemaStatus | null;
    try {
      [stats, schema] = await withTimeout(
        Promise.all([this.store.stats(), this.schemaStatus()]),
        timeoutMs,
      );
    } catch (error) {
      details.reasons.push(
        error instanceof HealthTimeout
          ? `store unreachable: no answer within ${timeoutMs} ms`
          : `store check failed: ${error instanceof Error ? error.message : String(error)}`,
      );
      return session.down(details) as OutboxHealthResult<Key>;
    }
    details.pending = stats.pending;
    details.dead = stats.dead;
    details.oldestPendingAgeMs = stats.oldestPendingAgeMs;
    if (schema) {
      details.schema = { current: schema.current, expected: schema.expected };
      if (schema.current === null) details.reasons.push('schema missing: no outbox tables');
      else if (!schema.upToDate) {
        details.reasons.push(
          `schema behind: version ${schema.current}, this release needs ${schema.expected}`,
        );
      }
    }
    if (stats.oldestPendingAgeMs > maxAge) {
      details.reasons.push(
        `lagging: oldest pending delivery is ${stats.oldestPendingAgeMs} ms old (over ${maxAge} ms)`,
      );
    }
    if (stats.dead > maxDead) {
      details.reasons.push(`dead letters: ${stats.dead} (over ${maxDead})`);
    }
    return (
      details.reasons.length > 0 ? session.down(details) : session.up(details)
    ) as OutboxHealthResult<Key>;
  }

  private health(): HealthIndicatorService {
    if (this.service) return this.service;
    assertInstalled('OutboxHealthIndicator', ['@nestjs/terminus']);
    const terminus = require('@nestjs/terminus') as typeof import('@nestjs/terminus');
    let service: HealthIndicatorService;
    try {
      service = this.moduleRef.get(terminus.HealthIndicatorService, { strict: false });
    } catch {
      // TerminusModule not imported here: the service holds no state, so one of our own will do.
      service = new terminus.HealthIndicatorService();
    }
    return (this.service = service);
  }

  /** SQL stores: the schema version of the outbox tables; `null` for other stores. */
  private async schemaStatus(): Promise<OutboxSchemaStatus | null> {
    let store: unknown = this.store;
    const deferred = store as { open?: () => Promise<OutboxStore> };
    if (typeof deferred.open === 'function') store = await deferred.open();
    const sql = store as { dataSource?: DataSource; options?: object };
    if (typeof sql.dataSource?.createQueryRunner !== 'function') return null;
    const { outboxSchemaStatus } =
      require('../stores/typeorm/schema/schema') as typeof import('../stores/typeorm/schema/schema');
    return outboxSchemaStatus(sql.dataSource, sql.options ?? {});
  }
}

class HealthTimeout extends Error {}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new HealthTimeout()), ms);
  });
  // The store's answer may still come (or fail) after the timeout: nobody waits for it then.
  promise.catch(() => undefined);
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
