import { Logger } from '@nestjs/common';
import type { SchedulerRegistry } from '@nestjs/schedule';
import { ResolvedOutboxOptions } from '../interfaces/outbox-module-options.interface';
import { OutboxStore } from '../interfaces/outbox-store.interface';
import { OUTBOX_CLEANUP_INTERVAL } from '../outbox.constants';
import { OutboxMessages } from '../outbox.messages';

/** How long one retention run keeps deleting full batches before it leaves the rest for the next. */
const CLEANUP_BUDGET_MS = 10_000;

/**
 * Retention: one store call deletes a bounded batch; while batches come back full (the append
 * rate outruns one batch per interval) it calls again, within a time budget, so storage stays
 * bounded at any sustainable rate without one long transaction.
 */
export class RetentionCleaner {
  private readonly logger = new Logger('OutboxDispatcher');
  private timer: NodeJS.Timeout | null = null;
  private registry: SchedulerRegistry | null = null;
  private cleaning: Promise<void> | null = null;
  private running = false;

  constructor(
    private readonly store: OutboxStore,
    private readonly retention: ResolvedOutboxOptions['retention'],
  ) {}

  /** Runs every `cleanupIntervalMs` (never when it is 0). */
  start(registry: SchedulerRegistry): void {
    this.running = true;
    const { cleanupIntervalMs } = this.retention;
    if (cleanupIntervalMs <= 0) return;
    this.registry = registry;
    this.timer = setInterval(() => void this.cleanup(), cleanupIntervalMs);
    registry.addInterval(OUTBOX_CLEANUP_INTERVAL, this.timer);
  }

  /** No further runs; a run in progress stops after its current batch. */
  stop(): void {
    this.running = false;
    if (!this.timer) return;
    clearInterval(this.timer);
    if (this.registry?.doesExist('interval', OUTBOX_CLEANUP_INTERVAL))
      this.registry.deleteInterval(OUTBOX_CLEANUP_INTERVAL);
    this.timer = null;
  }

  /** The run in progress, if any (shutdown waits for it before the store's connections close). */
  get inProgress(): Promise<void> | null {
    return this.cleaning;
  }

  private cleanup(): Promise<void> {
    this.cleaning ??= this.run().finally(() => (this.cleaning = null));
    return this.cleaning;
  }

  private async run(): Promise<void> {
    const { deliveredMs, deadLetterMs, batchSize } = this.retention;
    const until = performance.now() + CLEANUP_BUDGET_MS;
    const total = { events: 0, deadLetters: 0 };
    try {
      for (;;) {
        const result = await this.store.cleanup({
          deliveredRetentionMs: deliveredMs,
          deadLetterRetentionMs: deadLetterMs,
          batchSize,
        });
        total.events += result.events;
        total.deadLetters += result.deadLetters;
        const full = result.events >= batchSize || result.deadLetters >= batchSize;
        if (!full || performance.now() >= until || !this.running) break;
      }
    } catch (error) {
      this.logger.warn(OutboxMessages.cleanupFailed(error));
    }
    if (total.events + total.deadLetters > 0) {
      this.logger.debug(OutboxMessages.cleanupDone(total.events, total.deadLetters));
    }
  }
}
