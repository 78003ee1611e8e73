import { join } from 'node:path';
import { Injectable } from '@nestjs/common';
import { OutboxEvent, OutboxHandler } from 'nestjs-outbox';
import { forkFixture } from '../support/child-process';
import type { AppendCommand } from './fixtures/wake-producer';

export interface Producer {
  append(command: Omit<AppendCommand, 'op'>): Promise<{ ids: string[]; ms: number }>;
  close(): Promise<void>;
}

/** Starts the producer fixture in a child process (its own store, connections and registry). */
export async function spawnProducer(env: Record<string, string>): Promise<Producer> {
  const child = forkFixture(join(__dirname, 'fixtures', 'wake-producer.ts'), env);
  await child.next((message) => message === 'ready');
  type Reply = { ok: boolean; ids: string[]; ms: number; error?: string };
  return {
    // Replies come in request order; concurrent appends take them first come, first served.
    async append(command) {
      const reply = child.next<Reply>((m) => typeof m === 'object' && m !== null, 120_000);
      child.send({ op: 'append', ...command });
      const answer = await reply;
      if (!answer.ok) throw new Error(answer.error ?? 'append failed');
      return answer;
    },
    async close() {
      const timer = setTimeout(() => void child.kill(), 5_000);
      child.send({ op: 'exit' });
      await child.exited;
      clearTimeout(timer);
    },
  };
}

/** The worker's handlers: `wake.known` (the producer may know it too) and `wake.unknown`. */
@Injectable()
export class WorkerHandlers {
  readonly handledAt = new Map<string, number>();
  private readonly waiters = new Map<string, () => void>();

  @OutboxHandler('wake.known', { name: 'Wake.known' })
  known(event: OutboxEvent): void {
    this.seen(event.id);
  }

  @OutboxHandler('wake.unknown', { name: 'Wake.unknown' })
  unknown(event: OutboxEvent): void {
    this.seen(event.id);
  }

  /** Resolves with the time the handler started for `id` (at once if it already ran). */
  handled(id: string): Promise<number> {
    const at = this.handledAt.get(id);
    if (at !== undefined) return Promise.resolve(at);
    return new Promise((ok) => this.waiters.set(id, () => ok(this.handledAt.get(id)!)));
  }

  private seen(id: string): void {
    this.handledAt.set(id, Date.now());
    this.waiters.get(id)?.();
    this.waiters.delete(id);
  }
}

/** Resolves true once `check` holds, false after `ms`. */
export async function eventually(check: () => boolean | Promise<boolean>, ms: number) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return check();
}
