/**
 * The short chaos ledger (chaos/driver.ts): 2 worker processes consume 600 `ledger.entry` events
 * through `@Inbox()` while the driver SIGKILLs and restarts workers, SIGSTOPs one past its lease
 * and drops the workers' PostgreSQL connections. Every event's effect must be applied exactly once,
 * none lost, each key's effects in append order. Uses the suite's databases (PGDATABASE /
 * MYSQL_DATABASE) under a unique table prefix it drops. The long run: `npm run chaos`, see
 * docs/reliability.md.
 */
import { ChaosStore } from '../../chaos/common';
import { killAllWorkers, runChaos, summaryLine } from '../../chaos/driver';
import { TS_REGISTER } from '../support/child-process';
import { describeWithService } from '../support/services';

// Worker processes compile lib/ as under ts-node, through the suite's cached hook (faster starts).
process.env.CHAOS_TS_REGISTER = TS_REGISTER;

function chaosLedger(store: ChaosStore): void {
  afterAll(() => killAllWorkers());

  it('SIGKILL, SIGSTOP past the lease, dropped connections: 0 doubled, 0 lost, 0 out of order', async () => {
    const result = await runChaos({
      store,
      workers: 2,
      events: 600,
      seconds: 12,
      keys: 20,
      leaseMs: 2_000,
      kills: 2,
      stops: 1,
      terminates: 1,
      drainTimeoutMs: 90_000,
      log: () => undefined,
    });
    process.stdout.write(`${summaryLine(result)}\n`);
    expect(result).toMatchObject({
      appended: 600,
      appliedOnce: 600,
      doubled: 0,
      lost: 0,
      orderViolations: 0,
    });
    expect(result.faults.kills).toBe(2);
    expect(result.faults.stops).toBe(1);
  }, 240_000);
}

describeWithService('postgres', 'chaos ledger', () => chaosLedger('postgres'));
describeWithService('mariadb', 'chaos ledger', () => chaosLedger('mariadb'));
