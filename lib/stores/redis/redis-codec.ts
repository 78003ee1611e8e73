/**
 * What the Redis store's scripts are given and what they answer, as functions of their own: a
 * delivery error's arguments, the claim's reply, a dead letter's row.
 */

import { OutboxHeaders } from '../../interfaces/outbox-event.interface';
import {
  ClaimedDelivery,
  DeadLetter,
  DeadLetterReason,
  DeliveryErrorInput,
} from '../../interfaces/outbox-store.interface';
import { OUTBOX_ERROR_HISTORY } from '../../outbox.constants';
import { parseErrors, parseHeaders, Row } from './redis-views';

/** Longest stack stored (the `errorStacks.maxLength` option's ceiling). */
const MAX_STACK_LENGTH = 16_384;

/**
 * name, message and workerId go to Redis as JSON text (see the layout comment in redis-scripts).
 * JSON.stringify writes a lone UTF-16 surrogate (a message cut mid-pair) as a `\uXXXX` escape,
 * so every string survives the trip through UTF-8 and Lua and comes back exactly.
 */
export function errorArgs(error: DeliveryErrorInput): (string | number)[] {
  const attempt = Number.isFinite(error.attempt) ? Math.floor(error.attempt) : 0;
  return [
    JSON.stringify(String(error.name ?? '')),
    JSON.stringify(String(error.message ?? '')),
    attempt,
    JSON.stringify(String(error.workerId ?? '')),
    OUTBOX_ERROR_HISTORY,
    // '' for none; the JSON text of the string otherwise, as name and message.
    typeof error.stack === 'string' ? JSON.stringify(error.stack.slice(0, MAX_STACK_LENGTH)) : '',
  ];
}

/**
 * The claim script's reply: the lease deadline (an integer, or its text with ioredis'
 * `stringNumbers`), then one JSON text per chunk of deliveries, each a flat array of 10 values per
 * delivery: id, handler (its position in `names`), attempt, event id, type (its position in
 * `types`, or the text of a type the claim did not name), key or null, payload and headers (as
 * appended), occurredAt (ms, as the text stored at append), availableAt (ms). One JSON.parse per
 * chunk builds every value. A function of its own, not a loop in the async `claim` (measured: the
 * loop there cost more).
 */
export function decodeClaim(
  reply: [number | string, ...string[]],
  names: string[],
  types: string[],
  owner: string,
  token: string,
): ClaimedDelivery[] {
  // One deadline for the whole claim; leases are replaced, never changed, so they share it.
  const leaseUntil = new Date(Number(reply[0]));
  const out: ClaimedDelivery[] = [];
  for (let c = 1; c < reply.length; c++) {
    const flat = JSON.parse(reply[c] as string) as unknown[];
    for (let i = 0; i < flat.length; i += 10) {
      const id = flat[i] as string;
      const type = flat[i + 4];
      out.push({
        id,
        handler: names[(flat[i + 1] as number) - 1],
        attempt: flat[i + 2] as number,
        event: {
          id: flat[i + 3] as string,
          type: typeof type === 'number' ? types[type - 1] : (type as string),
          payload: flat[i + 6],
          key: flat[i + 5] as string | null,
          headers: flat[i + 7] as OutboxHeaders,
          occurredAt: new Date(Number(flat[i + 8])),
          availableAt: new Date(Number(flat[i + 9])),
        },
        // One token per claim, as the SQL stores do (see the claim script).
        lease: { deliveryId: id, owner, token, leaseUntil },
      });
    }
  }
  return out;
}

export function deadLetterFromRow(row: Row): DeadLetter {
  const [id, eventId, handler, type, key, attempts, reason, er, deadAt, pl, hd, oa] = row;
  return {
    id: String(id),
    eventId: String(eventId),
    type: String(type),
    key: key === null ? null : String(key),
    handler: String(handler),
    payload: JSON.parse(String(pl)),
    headers: parseHeaders(hd),
    occurredAt: new Date(Number(oa)),
    attempts: Number(attempts),
    reason: (reason ?? 'exhausted') as DeadLetterReason,
    errors: parseErrors(er),
    deadAt: new Date(Number(deadAt)),
  };
}
