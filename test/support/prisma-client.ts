import { execFileSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** The test schemas: PostgreSQL (test/fixtures/prisma) and MySQL/MariaDB (prisma-mysql). */
const FIXTURES = ['prisma', 'prisma-mysql'].map((name) => join(__dirname, '..', 'fixtures', name));

/**
 * Generates the Prisma clients of the test schemas when missing or older than their schema: they
 * are not committed (generated code, ~100 kB each). Runs offline: `prisma generate` only needs
 * the schema engine for nothing it does here, so `PRISMA_SCHEMA_ENGINE_BINARY` points it at a
 * no-op instead of letting it download one; the generated clients need no engine.
 */
export function generatePrismaClient(): void {
  for (const dir of FIXTURES)
    generate(join(dir, 'schema.prisma'), join(dir, 'generated', 'client.ts'));
}

function generate(schema: string, client: string): void {
  if (existsSync(client) && statSync(client).mtimeMs >= statSync(schema).mtimeMs) return;
  execFileSync(
    process.execPath,
    [require.resolve('prisma/build/index.js'), 'generate', '--schema', schema],
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
