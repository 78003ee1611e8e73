import { describe } from '@jest/globals';
import { appendContract } from './contract/append';
import { claimAndOrderContract } from './contract/claim-and-order';
import { storeClockContract } from './contract/clock';
import {
  contractKit,
  OutboxStoreContractContext,
  OutboxStoreContractOptions,
} from './contract/kit';
import { inspectionContract } from './contract/inspection';
import { leasesAndFencingContract } from './contract/leases-and-fencing';
import { racesContract } from './contract/races';
import { replayAndPurgeContract } from './contract/replay-and-purge';
import { retentionContract } from './contract/retention';
import { retriesAndDeadLettersContract } from './contract/retries-and-dead-letters';

export type { OutboxStoreContractContext, OutboxStoreContractOptions } from './contract/kit';

/**
 * Registers the shared store contract (every store-level guarantee of docs/guarantees.md) as a jest
 * `describe` block. Run it against your own `OutboxStore` to check it behaves like ours.
 *
 * Each concern is its own file in `contract/` (append, claim and order, leases and fencing,
 * retries and dead letters, replay and purge, the store clock, retention, races, the admin
 * API's read-only views), all sharing the
 * per-test store and helpers of `contract/kit.ts`.
 */
export function describeOutboxStoreContract(
  name: string,
  factory: () => Promise<OutboxStoreContractContext>,
  options: OutboxStoreContractOptions = {},
): void {
  describe(`OutboxStore contract: ${name}`, () => {
    const kit = contractKit(factory, options);
    appendContract(kit);
    claimAndOrderContract(kit);
    leasesAndFencingContract(kit);
    racesContract(kit);
    retriesAndDeadLettersContract(kit);
    replayAndPurgeContract(kit);
    storeClockContract(kit);
    retentionContract(kit);
    inspectionContract(kit);
  });
}
