import { Lease } from '../../interfaces/outbox-store.interface';

/** Length of a delivery id the scripts make (a UUID's text: 36 ASCII characters). */
const ID_LENGTH = 36;

/**
 * The `ackMany` script's arguments for leases already grouped (see `grouped`): per group of one
 * owner and token, `owner, token, n, id…` — or, when every id of the group is 36 ASCII characters
 * (every id the scripts make), `owner, token, '#n', ids`, the n ids back to back in one argument.
 * One argument instead of n spares the client n argument encodings and Redis n argument strings;
 * the script cuts the ids out again at fixed width. Any other id (a caller's own text) keeps the
 * form of one argument per id.
 */
export function ackManyArgs(order: Lease[]): string[] {
  const args: string[] = [];
  for (let start = 0; start < order.length;) {
    const { owner, token } = order[start];
    let end = start + 1;
    while (end < order.length && order[end].owner === owner && order[end].token === token) end++;
    const ids = new Array<string>(end - start);
    let fixed = true;
    for (let k = start; k < end; k++) {
      const id = order[k].deliveryId;
      if (id.length !== ID_LENGTH) fixed = false;
      ids[k - start] = id;
    }
    const n = end - start;
    const packed = fixed ? ids.join('') : '';
    // Every character one byte: no id holds more bytes than characters, so each holds 36.
    if (fixed && Buffer.byteLength(packed, 'utf8') === n * ID_LENGTH) {
      args.push(owner, token, `#${n}`, packed);
    } else {
      args.push(owner, token, String(n), ...ids);
    }
    start = end;
  }
  return args;
}

/**
 * Leases with the same owner and token next to each other, each group in its original order. A
 * worker acks its own leases, usually of one or a few claims, and a claim's leases arrive
 * together: the leases come back as they are when no group is split.
 */
export function grouped(leases: Lease[]): Lease[] {
  const seen = new Set<string>();
  let prev: Lease | undefined;
  let split = false;
  for (const lease of leases) {
    if (prev && lease.owner === prev.owner && lease.token === prev.token) continue;
    const group = JSON.stringify([lease.owner, lease.token]);
    if (seen.has(group)) {
      split = true;
      break;
    }
    seen.add(group);
    prev = lease;
  }
  if (!split) return leases;
  const groups = new Map<string, Lease[]>();
  for (const lease of leases) {
    const group = JSON.stringify([lease.owner, lease.token]);
    const list = groups.get(group);
    if (list) list.push(lease);
    else groups.set(group, [lease]);
  }
  return [...groups.values()].flat();
}
