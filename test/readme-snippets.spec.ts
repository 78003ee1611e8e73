import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import * as ts from 'typescript';

/**
 * Every ```ts block of the README and of the guides in docs/ is a complete file that must
 * type-check against the library (through the `nestjs-outbox` path mapping), so the manual cannot
 * drift from the code.
 */
describe('README snippets', () => {
  const root = resolve(__dirname, '..');
  const pages = [
    'README.md',
    ...readdirSync(join(root, 'docs'))
      .filter((f) => f.endsWith('.md'))
      .map((f) => `docs/${f}`),
  ];
  const snippets = pages.flatMap((page) =>
    [...readFileSync(join(root, page), 'utf8').matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]),
  );

  it('has TypeScript snippets', () => {
    expect(snippets.length).toBeGreaterThan(5);
  });

  /**
   * The compiler options of an app made with `nest new` (Nest 11 CLI): `isolatedModules` with
   * `emitDecoratorMetadata` refuses a type-only import used in a decorated signature (TS1272),
   * which the repository's own tsconfig lets pass. Both module settings the CLI has generated.
   */
  const nestNewOptions = (module: 'nodenext' | 'commonjs'): ts.CompilerOptions => {
    const { options, errors } = ts.convertCompilerOptionsFromJson(
      {
        module,
        moduleResolution: module === 'nodenext' ? 'nodenext' : 'node10',
        resolvePackageJsonExports: module === 'nodenext',
        esModuleInterop: true,
        isolatedModules: true,
        declaration: true,
        removeComments: true,
        emitDecoratorMetadata: true,
        experimentalDecorators: true,
        allowSyntheticDefaultImports: true,
        target: 'ES2023',
        sourceMap: true,
        baseUrl: root,
        skipLibCheck: true,
        strictNullChecks: true,
        forceConsistentCasingInFileNames: true,
        noImplicitAny: false,
        strictBindCallApply: false,
        noFallthroughCasesInSwitch: false,
        types: ['node', 'jest'],
        // Stands in for the installed package.
        paths: {
          'nestjs-outbox': ['lib/index.ts'],
          'nestjs-outbox/testing': ['lib/testing/index.ts'],
        },
      },
      root,
    );
    expect(errors).toEqual([]);
    return options;
  };

  const repoOptions = (): ts.CompilerOptions => {
    const config = ts.readConfigFile(join(root, 'tsconfig.json'), ts.sys.readFile);
    return ts.parseJsonConfigFileContent(config.config, ts.sys, root).options;
  };

  it.each([
    ['the repository tsconfig', repoOptions],
    ['a `nest new` tsconfig (module nodenext)', () => nestNewOptions('nodenext')],
    ['a `nest new` tsconfig (module commonjs)', () => nestNewOptions('commonjs')],
  ])(
    'compiles every TypeScript snippet under %s',
    (_name, options) => {
      const dir = mkdtempSync(join(root, 'test', '.readme-'));
      try {
        // The Prisma snippet imports the client `prisma generate` writes into the app
        // (`./generated/prisma/client`): here, the one generated for the tests.
        mkdirSync(join(dir, 'generated', 'prisma'), { recursive: true });
        writeFileSync(
          join(dir, 'generated', 'prisma', 'client.ts'),
          "export * from '../../../fixtures/prisma/generated/client';\n",
        );
        const files = snippets.map((code, i) => {
          const file = join(dir, `snippet-${i + 1}.ts`);
          // Each snippet is its own module even when it has no import.
          writeFileSync(file, `${code}\nexport {};\n`);
          return file;
        });
        const program = ts.createProgram(files, {
          ...options(),
          noEmit: true,
          incremental: false,
          noUnusedLocals: false,
        });
        const diagnostics = ts
          .getPreEmitDiagnostics(program)
          .filter((d) => d.file && files.includes(resolve(d.file.fileName)));
        const messages = diagnostics.map((d) => {
          const { line } = d.file!.getLineAndCharacterOfPosition(d.start ?? 0);
          return `${d.file!.fileName.split('/').pop()}:${line + 1} TS${d.code} ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
        });
        expect(messages).toEqual([]);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
    120_000,
  );
});
