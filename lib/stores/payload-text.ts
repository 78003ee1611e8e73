import { AppendableEvent } from '../interfaces/outbox-store.interface';

/**
 * The JSON text `OutboxService` serialized a validated event's payload to, so a store writes it
 * instead of serializing again. Kept off the event (a store wrapper that copies an event with
 * another payload must not carry the old text along) and tied to the payload object it was made
 * from (a payload replaced on the same event is serialized anew).
 */
const texts = new WeakMap<AppendableEvent, { payload: unknown; text: string }>();

export function rememberPayloadText(event: AppendableEvent, text: string): void {
  texts.set(event, { payload: event.payload, text });
}

/** The remembered text, or `undefined` when the store must serialize `payload` itself. */
export function payloadTextOf(event: AppendableEvent): string | undefined {
  const entry = texts.get(event);
  return entry !== undefined && entry.payload === event.payload ? entry.text : undefined;
}
