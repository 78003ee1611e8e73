import { ChildProcess, spawn } from 'node:child_process';
import { createServer, Server } from 'node:net';
import { resolve } from 'node:path';

/**
 * `npm start` as a new user runs it: the banner names the variables the sample reads and the
 * dashboard's address, and a busy or malformed PORT ends the process with a line saying what to do.
 */
const root = resolve(__dirname, '../..');

interface Run {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

function start(env: Record<string, string>): Run {
  const child = spawn('npm', ['start', '--silent'], {
    cwd: root,
    // Transpile only: the type check of `npm start` is the suite's tsc run, not this test's.
    env: { ...process.env, SAMPLE_DB: ':memory:', TS_NODE_TRANSPILE_ONLY: 'true', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let text = '';
  child.stdout!.on('data', (chunk: Buffer) => (text += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (text += chunk.toString()));
  const exited = new Promise<number | null>((done) => child.on('exit', (code) => done(code)));
  return { child, output: () => text, exited };
}

async function waitFor(run: Run, pattern: RegExp, ms = 60_000): Promise<RegExpMatchArray> {
  const until = Date.now() + ms;
  for (;;) {
    const match = run.output().match(pattern);
    if (match) return match;
    if (Date.now() > until || run.child.exitCode !== null) {
      throw new Error(`no ${pattern} in the output:\n${run.output()}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

function stop(run: Run): void {
  if (run.child.exitCode === null && run.child.pid) {
    try {
      process.kill(-run.child.pid, 'SIGTERM');
    } catch {
      // Already gone.
    }
  }
}

describe('npm start (the sample app)', () => {
  jest.setTimeout(120_000);
  const runs: Run[] = [];
  afterEach(() => runs.splice(0).forEach(stop));

  it('prints its address, the dashboard URL and the variables it reads, and serves', async () => {
    const run = start({ PORT: '0' });
    runs.push(run);
    const [, url] = await waitFor(run, /Sample app on (http:\/\/127\.0\.0\.1:\d+)/);
    await waitFor(run, /SAMPLE_BROKER_URL/);
    const text = run.output();
    // Sign in first (a plain browser has no x-admin-key header), then the console.
    expect(text).toContain(`Dashboard: ${url}/admin/sign-in (admin key `);
    expect(text).toContain(`then ${url}/outbox/ui`);
    for (const name of ['PORT', 'SAMPLE_DB', 'SAMPLE_ADMIN_KEY', 'SAMPLE_BROKER']) {
      expect(text).toMatch(new RegExp(`^  ${name} `, 'm'));
    }
    const response = await fetch(`${url}/players`);
    expect(response.status).toBe(200);
  });

  it('on a busy port, says so and how to pick another, and exits', async () => {
    const busy: Server = createServer();
    await new Promise<void>((done) => busy.listen(0, '127.0.0.1', done));
    const port = (busy.address() as { port: number }).port;
    try {
      const run = start({ PORT: String(port) });
      runs.push(run);
      expect(await run.exited).toBe(1);
      expect(run.output()).toContain(`Port ${port} on 127.0.0.1 is taken by another process`);
      expect(run.output()).toContain(`PORT=${port + 1} npm start`);
      // Nest logs the listen error itself; the hint is the last thing printed.
      expect(run.output().trim().split('\n').at(-1)).toMatch(/^Port \d+ on 127\.0\.0\.1 is taken/);
    } finally {
      await new Promise((done) => busy.close(done));
    }
  });

  it('refuses a PORT that is not a number', async () => {
    const run = start({ PORT: 'http' });
    runs.push(run);
    expect(await run.exited).toBe(1);
    expect(run.output()).toContain('PORT=http is not a port number');
  });
});
