import { ChildProcess, fork } from 'node:child_process';
import { join, resolve } from 'node:path';
import { Injectable } from '@nestjs/common';
import { OutboxEvent, OutboxHandler } from 'nestjs-outbox';
import type { AppendCommand } from './fixtures/wake-producer';

export interface Producer {
  append(command: Omit<AppendCommand, 'op'>): Promise<{ ids: string[]; ms: number }>;
  close(): Promise<void>;
}

/** Starts the producer fixture in a child process (its own store, connections and registry). */
export function spawnProducer(env: Record<string, string>): Promise<Producer> {
  return new Promise((done, fail) => {
    const child: ChildProcess = fork(join(__dirname, 'fixtures', 'wake-producer.ts'), [], {
      cwd: resolve(__dirname, '..', '..'),
      execArgv: ['-r', 'ts-node/register/transpile-only'],
      env: { ...process.env, TS_NODE_PROJECT: 'tsconfig.json', ...env },
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    let stderr = '';
    child.stderr?.on('data', (chunk) => (stderr += chunk));
    child.once('exit', (code) => fail(new Error(`producer exited (${code}): ${stderr}`)));
    let pending: ((reply: { ok: boolean; ids: string[]; ms: number; error?: string }) => void)[] =
      [];
    child.on('message', (message) => {
      if (message === 'ready') {
        done({
          append: (command) =>
            new Promise((ok, ko) => {
              pending.push((reply) =>
                reply.ok ? ok(reply) : ko(new Error(reply.error ?? 'append failed')),
              );
              child.send({ op: 'append', ...command });
            }),
          close: () =>
            new Promise<void>((closed) => {
              child.removeAllListeners('exit');
              const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
              child.once('exit', () => {
                clearTimeout(timer);
                closed();
              });
              child.send({ op: 'exit' });
            }),
        });
        return;
      }
      const [first, ...rest] = pending;
      pending = rest;
      first?.(message as never);
    });
  });
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
