import { execFileSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';

const DIR = join(__dirname, '..', 'fixtures', 'prisma');
const SCHEMA = join(DIR, 'schema.prisma');
const CLIENT = join(DIR, 'generated', 'client.ts');

/**
 * Generates the Prisma client of the test schema (test/fixtures/prisma) when it is missing or
 * older than the schema: it is not committed (generated code, ~100 kB). Runs offline: `prisma
 * generate` only needs the schema engine for nothing it does here, so `PRISMA_SCHEMA_ENGINE_BINARY`
 * points it at a no-op instead of letting it download one; the generated client needs no engine.
 */
export function generatePrismaClient(): void {
  if (existsSync(CLIENT) && statSync(CLIENT).mtimeMs >= statSync(SCHEMA).mtimeMs) return;
  execFileSync(
    process.execPath,
    [require.resolve('prisma/build/index.js'), 'generate', '--schema', SCHEMA],
    {
      env: {
        ...process.env,
        PRISMA_SCHEMA_ENGINE_BINARY: process.env.PRISMA_SCHEMA_ENGINE_BINARY ?? '/bin/true',
        CHECKPOINT_DISABLE: '1',
        PRISMA_HIDE_UPDATE_MESSAGE: '1',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
}

if (require.main === module) generatePrismaClient();
