import { Injectable, Logger, OnApplicationBootstrap, Optional } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import {
  OUTBOX_OBSERVATION_KINDS,
  OutboxObservation,
  OutboxObservationKind,
} from './outbox-events.interface';
import { ObservabilityMessages } from './observability.messages';

type Listener<K extends OutboxObservationKind> = (
  event: Extract<OutboxObservation, { kind: K }>,
) => void;

/** Prefix of the names under which the stream is forwarded to `@nestjs/event-emitter`. */
export const OUTBOX_EVENT_EMITTER_PREFIX = 'outbox.';

/**
 * The outbox's event stream (docs/monitoring.md): the dispatcher, `OutboxService` and the inbox
 * report what happens here, and the logs, Prometheus metrics and your own listeners subscribe.
 * Listeners run synchronously on the dispatcher's path: keep them short, and do not throw (a
 * listener that throws is logged, never allowed to break a delivery). When the app registered
 * `EventEmitterModule` of `@nestjs/event-emitter`, every event is also emitted there as
 * `outbox.<kind>` (e.g. `@OnEvent('outbox.dead-lettered')`).
 *
 * Emitting costs one property read when nobody listens to a kind: producers ask `wants(kind)`
 * before they build the event.
 */
@Injectable()
export class OutboxEvents implements OnApplicationBootstrap {
  private readonly logger = new Logger('OutboxEvents');
  private readonly listeners = new Map<OutboxObservationKind, Set<(event: never) => void>>();
  /** Kinds with at least one listener (read on every emit site). */
  private readonly wanted: Record<OutboxObservationKind, boolean> = Object.fromEntries(
    OUTBOX_OBSERVATION_KINDS.map((kind) => [kind, false]),
  ) as Record<OutboxObservationKind, boolean>;

  constructor(@Optional() private readonly moduleRef?: ModuleRef) {}

  /**
   * Calls `listener` for every event of the given kinds (all kinds when `kinds` is omitted).
   * Returns a function that unsubscribes.
   */
  on<K extends OutboxObservationKind>(kinds: K | readonly K[], listener: Listener<K>): () => void;
  on(listener: (event: OutboxObservation) => void): () => void;
  on(kindsOrListener: unknown, maybeListener?: unknown): () => void {
    const kinds = (
      typeof kindsOrListener === 'function'
        ? OUTBOX_OBSERVATION_KINDS
        : typeof kindsOrListener === 'string'
          ? [kindsOrListener]
          : kindsOrListener
    ) as readonly OutboxObservationKind[];
    const listener = (
      typeof kindsOrListener === 'function' ? kindsOrListener : maybeListener
    ) as Listener<never>;
    if (typeof listener !== 'function') {
      throw new TypeError('OutboxEvents.on: expected (kinds, listener) or (listener)');
    }
    for (const kind of kinds) {
      if (!OUTBOX_OBSERVATION_KINDS.includes(kind)) {
        throw new TypeError(
          `OutboxEvents.on: unknown kind ${JSON.stringify(kind)}; known: ${OUTBOX_OBSERVATION_KINDS.join(', ')}`,
        );
      }
      let set = this.listeners.get(kind);
      if (!set) this.listeners.set(kind, (set = new Set()));
      set.add(listener);
      this.wanted[kind] = true;
    }
    return () => {
      for (const kind of kinds) {
        const set = this.listeners.get(kind);
        set?.delete(listener);
        this.wanted[kind] = (set?.size ?? 0) > 0;
      }
    };
  }

  /** Whether anybody listens to `kind` (build the event only then). */
  wants(kind: OutboxObservationKind): boolean {
    return this.wanted[kind];
  }

  /** Hands `event` to its listeners; a listener that throws is logged and skipped. */
  emit(event: OutboxObservation): void {
    const set = this.listeners.get(event.kind);
    if (!set) return;
    for (const listener of set) {
      try {
        (listener as (event: OutboxObservation) => void)(event);
      } catch (error) {
        this.logger.error(ObservabilityMessages.listenerThrew(event.kind, error));
      }
    }
  }

  /** Forwards the stream to `@nestjs/event-emitter`, when it is installed and registered. */
  onApplicationBootstrap(): void {
    const emitter = this.findEventEmitter();
    if (!emitter) return;
    this.on((event) => emitter.emit(OUTBOX_EVENT_EMITTER_PREFIX + event.kind, event));
  }

  private findEventEmitter(): { emit(name: string, payload: unknown): unknown } | null {
    if (!this.moduleRef) return null;
    let EventEmitter2: abstract new (...args: never[]) => unknown;
    try {
      // An optional peer: used only when the app itself loaded it (to register
      // EventEmitterModule), so an app that does not use it never loads it through us.
      const path = require.resolve('@nestjs/event-emitter');
      if (!require.cache[path]) return null;
      ({ EventEmitter2 } = require(path) as { EventEmitter2: typeof EventEmitter2 });
    } catch {
      return null;
    }
    try {
      return this.moduleRef.get(EventEmitter2, { strict: false }) as {
        emit(name: string, payload: unknown): unknown;
      };
    } catch {
      // Installed but EventEmitterModule is not registered in this app.
      return null;
    }
  }
}
