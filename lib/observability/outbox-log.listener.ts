import { Inject, Injectable, Logger, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { ResolvedOutboxOptions } from '../interfaces/outbox-module-options.interface';
import { OUTBOX_RESOLVED_OPTIONS } from '../outbox.constants';
import { ObservabilityMessages } from './observability.messages';
import { OutboxEvents } from './outbox-events';

/**
 * The outbox's log lines, built on the event stream and written through Nest's `Logger` (so an
 * app's pino or winston logger applies): one error per dead letter, one warning per lease loss,
 * planned retry, abandoned run and store error, an info line when an abandoned handler settles,
 * and a debug line per claimed delivery. Each names the event id,
 * type, handler, attempt and worker; payloads are never logged. Off with `logs: false`.
 */
@Injectable()
export class OutboxLogListener implements OnModuleInit, OnApplicationShutdown {
  private readonly logger = new Logger('OutboxDispatcher');
  private readonly unsubscribe: (() => void)[] = [];

  constructor(
    private readonly events: OutboxEvents,
    @Inject(OUTBOX_RESOLVED_OPTIONS) private readonly options: ResolvedOutboxOptions,
  ) {}

  onModuleInit(): void {
    if (this.options.observability?.logs === false) return;
    const { events, logger } = this;
    this.unsubscribe.push(
      events.on('dead-lettered', (e) =>
        logger.error(ObservabilityMessages.deadLettered(e, e.error, e.reason)),
      ),
      events.on('retry-scheduled', (e) =>
        logger.warn(ObservabilityMessages.retryScheduled(e, e.error, e.delayMs)),
      ),
      events.on('lease-lost', (e) => logger.warn(ObservabilityMessages.leaseLost(e, e.during))),
      events.on('abandoned', (e) => logger.warn(ObservabilityMessages.abandoned(e))),
      events.on('abandoned-settled', (e) =>
        logger.log(ObservabilityMessages.abandonedSettled(e, e.durationMs, e.failed)),
      ),
      events.on('store-error', (e) => logger.warn(ObservabilityMessages.storeError(e))),
    );
    // A line per claimed delivery is not even built when the app's log levels leave debug out
    // (levels unknown, as with a custom logger instance: the logger decides).
    const levels = (Logger as unknown as { logLevels?: unknown }).logLevels;
    if (!Array.isArray(levels) || Logger.isLevelEnabled('debug')) {
      this.unsubscribe.push(
        events.on('claimed', (e) => logger.debug(ObservabilityMessages.claimed(e))),
      );
    }
  }

  /** After the dispatcher's shutdown, so what happens while it drains is still logged. */
  onApplicationShutdown(): void {
    for (const off of this.unsubscribe.splice(0)) off();
  }
}
