import { Injectable, OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { OutboxEvents } from '../observability/outbox-events';

/** Minutes kept per handler: the last hour. */
export const THROUGHPUT_MINUTES = 60;
/** Handlers tracked at most; outcomes of further names are not counted (bounded memory). */
export const THROUGHPUT_MAX_HANDLERS = 1_000;

const MINUTE_MS = 60_000;

interface Bucket {
  /** Minute number (epoch ms / 60 000) this slot counts; an older one is stale. */
  minute: number;
  delivered: number;
  failed: number;
}

export interface ThroughputMinute {
  /** Start of the minute. */
  at: Date;
  delivered: number;
  /** Failed attempts: retries scheduled and dead letters. */
  failed: number;
}

/**
 * Per-handler outcomes of this process's dispatcher over the last hour, in one-minute buckets: a
 * ring of 60 slots per handler, fed by the outbox event stream (`delivered`, `retry-scheduled`,
 * `dead-lettered`). Counts only what this process delivered, from the time the admin module
 * started; other replicas count their own.
 */
@Injectable()
export class OutboxAdminThroughput implements OnModuleInit, OnModuleDestroy {
  private readonly rings = new Map<string, Bucket[]>();
  private unsubscribe: (() => void) | null = null;
  /** Process clock (ms); replaceable in tests. */
  clock: () => number = () => Date.now();

  constructor(private readonly moduleRef: ModuleRef) {}

  onModuleInit(): void {
    let events: OutboxEvents;
    try {
      events = this.moduleRef.get(OutboxEvents, { strict: false });
    } catch {
      return; // No OutboxModule: the service reports that on its own.
    }
    this.unsubscribe = events.on(['delivered', 'retry-scheduled', 'dead-lettered'], (event) =>
      this.record(event.handler, event.kind === 'delivered' ? 'delivered' : 'failed'),
    );
  }

  onModuleDestroy(): void {
    this.unsubscribe?.();
    this.unsubscribe = null;
  }

  record(handler: string, outcome: 'delivered' | 'failed'): void {
    let ring = this.rings.get(handler);
    if (!ring) {
      if (this.rings.size >= THROUGHPUT_MAX_HANDLERS) return;
      ring = Array.from({ length: THROUGHPUT_MINUTES }, () => ({
        minute: -1,
        delivered: 0,
        failed: 0,
      }));
      this.rings.set(handler, ring);
    }
    const minute = Math.floor(this.clock() / MINUTE_MS);
    const bucket = ring[minute % THROUGHPUT_MINUTES];
    if (bucket.minute !== minute) {
      bucket.minute = minute;
      bucket.delivered = 0;
      bucket.failed = 0;
    }
    bucket[outcome] += 1;
  }

  /** Handlers with outcomes counted since start. */
  handlers(): string[] {
    return [...this.rings.keys()];
  }

  /** The last 60 minutes of `handler`, oldest first, the current minute last. */
  minutes(handler: string): ThroughputMinute[] {
    const ring = this.rings.get(handler);
    const current = Math.floor(this.clock() / MINUTE_MS);
    return Array.from({ length: THROUGHPUT_MINUTES }, (_, i) => {
      const minute = current - (THROUGHPUT_MINUTES - 1) + i;
      const bucket = ring?.[minute % THROUGHPUT_MINUTES];
      const live = bucket && bucket.minute === minute;
      return {
        at: new Date(minute * MINUTE_MS),
        delivered: live ? bucket.delivered : 0,
        failed: live ? bucket.failed : 0,
      };
    });
  }
}
