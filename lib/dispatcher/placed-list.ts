/**
 * An unordered list whose entries keep their own index in field `at` (-1 when out), so adding is
 * a push and removing a swap with the last entry. The dispatcher's long-lived collections use it
 * instead of a `Set`: see `LeaseKeeper.kept`. A `Slot` is in two such lists at once (kept leases,
 * running calls), hence one field per list.
 */
export type Placed<K extends string> = Record<K, number>;

/** Adds `item` unless it is in already. */
export function addPlaced<K extends string, T extends Placed<K>>(list: T[], item: T, at: K): void {
  if (item[at] >= 0) return;
  item[at] = list.length as T[K];
  list.push(item);
}

/** Removes `item`; false if it was not in. */
export function removePlaced<K extends string, T extends Placed<K>>(
  list: T[],
  item: T,
  at: K,
): boolean {
  const index = item[at];
  if (index < 0) return false;
  item[at] = -1 as T[K];
  const last = list.pop()!;
  if (last !== item) {
    last[at] = index as T[K];
    list[index] = last;
  }
  return true;
}
