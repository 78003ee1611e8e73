import { randomFillSync } from 'node:crypto';

/**
 * Ids the library generates (events appended without `id`, deliveries): UUID version 7 (RFC 9562),
 * a 48-bit millisecond timestamp first, then a 12-bit counter and 62 random bits. Ids made one
 * after another sort in the order they were made, so the SQL stores' id indexes (and MySQL /
 * MariaDB's clustered primary key of deliveries) grow at their right edge, as an auto-increment
 * key does, instead of at a random page per insert; a claim's batch and its ack then touch a few
 * index pages, not one per row. Ids are still unique and unguessable enough for an outbox (62
 * random bits per id), but they reveal when they were made.
 *
 * Within one millisecond the counter goes up from a random start below 2^11, so ids of one
 * process stay in order; should it run out (over 2,048 ids in a millisecond) the timestamp moves
 * on by one, as RFC 9562 allows.
 */
export function newId(): string {
  if (offset + 10 > POOL.length) {
    randomFillSync(POOL);
    offset = 0;
  }
  const r = POOL;
  const o = offset;
  offset += 10;
  const ms = Math.floor(Date.now());
  if (ms > lastMs) {
    lastMs = ms;
    counter = ((r[o + 8] & 0x07) << 8) | r[o + 9];
  } else if (++counter > 0xfff) {
    // Over 2,048 ids in one millisecond (or the clock went back): borrow the next millisecond.
    lastMs++;
    counter = ((r[o + 8] & 0x07) << 8) | r[o + 9];
  }
  if (prefixMs !== lastMs) {
    prefixMs = lastMs;
    const time = lastMs.toString(16).padStart(12, '0');
    prefix = `${time.slice(0, 8)}-${time.slice(8)}-`;
  }
  return (
    `${prefix}${(0x7000 | counter).toString(16)}-` +
    `${HEX[0x80 | (r[o] & 0x3f)]}${HEX[r[o + 1]]}-` +
    `${HEX[r[o + 2]]}${HEX[r[o + 3]]}${HEX[r[o + 4]]}${HEX[r[o + 5]]}${HEX[r[o + 6]]}${HEX[r[o + 7]]}`
  );
}

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));
/** The millisecond of the last id made, and the counter within it. */
let lastMs = 0;
let counter = 0;
/** The first 14 characters of ids made in millisecond `prefixMs`. */
let prefixMs = -1;
let prefix = '';
// Random bytes are drawn in blocks (10 per id), not one `randomFillSync` per id.
const POOL = Buffer.alloc(4000);
let offset = POOL.length;
