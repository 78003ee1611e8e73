import { ChildProcess, fork } from 'node:child_process';
import { resolve } from 'node:path';

const ROOT = resolve(__dirname, '..', '..');

/**
 * `-r` this in a child process instead of `ts-node/register/transpile-only`: the same compile
 * (TypeScript's transpileModule with tsconfig.json's options), cached on disk across processes.
 */
export const TS_REGISTER = resolve(__dirname, 'ts-register.js');

/** A TypeScript fixture running in a child process, talking to the test over IPC. */
export interface FixtureProcess {
  readonly child: ChildProcess;
  /** Everything the child wrote to stderr so far (for failure messages). */
  stderr(): string;
  /** Settles when the child exits, with its code or signal. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves with the next IPC message `accept` takes (the first message by default). */
  next<T = unknown>(accept?: (message: unknown) => boolean, timeoutMs?: number): Promise<T>;
  send(message: unknown): void;
  /** SIGKILLs the child (no shutdown hooks run) and waits for it to be gone. */
  kill(): Promise<void>;
}

/**
 * Forks `file` (a `.ts` fixture, compiled as by ts-node: see TS_REGISTER) with the test's
 * environment plus `env`. Messages that arrive before anyone waits for them are kept, so `next()`
 * never misses one.
 */
export function forkFixture(file: string, env: Record<string, string> = {}): FixtureProcess {
  const child = fork(file, [], {
    cwd: ROOT,
    execArgv: ['-r', TS_REGISTER],
    env: { ...process.env, TS_NODE_PROJECT: 'tsconfig.json', ...env },
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) =>
    child.once('exit', (code, signal) => done({ code, signal })),
  );
  const inbox: unknown[] = [];
  const waiters: { accept: (m: unknown) => boolean; done: (m: unknown) => void }[] = [];
  child.on('message', (message) => {
    const index = waiters.findIndex((w) => w.accept(message));
    if (index === -1) {
      inbox.push(message);
      return;
    }
    const [waiter] = waiters.splice(index, 1);
    waiter.done(message);
  });
  return {
    child,
    exited,
    stderr: () => stderr,
    next<T>(accept: (message: unknown) => boolean = () => true, timeoutMs = 60_000) {
      const index = inbox.findIndex(accept);
      if (index !== -1) return Promise.resolve(inbox.splice(index, 1)[0] as T);
      return new Promise<T>((done, fail) => {
        const timer = setTimeout(
          () => fail(new Error(`no message from ${file} within ${timeoutMs} ms: ${stderr}`)),
          timeoutMs,
        );
        const waiter = {
          accept,
          done: (message: unknown) => {
            clearTimeout(timer);
            void exited.then(() => undefined);
            done(message as T);
          },
        };
        waiters.push(waiter);
        void exited.then(({ code, signal }) => {
          if (!waiters.includes(waiter)) return;
          clearTimeout(timer);
          fail(new Error(`${file} exited (${code ?? signal}) before answering: ${stderr}`));
        });
      });
    },
    send: (message) => child.send(message as never),
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

/**
 * When the child exited (`Date.now()`), or null if it still runs after `withinMs`. The wait's
 * timer is cleared either way, so it never keeps a Jest worker alive after the test.
 */
export async function exitTime(fixture: FixtureProcess, withinMs: number): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      fixture.exited.then(() => Date.now()),
      new Promise<null>((done) => {
        timer = setTimeout(() => done(null), withinMs);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
