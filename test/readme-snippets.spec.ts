import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import * as ts from 'typescript';

/**
 * Every ```ts block of the README is a complete file that must type-check against the library
 * (through the `nestjs-outbox` path mapping), so the manual cannot drift from the code.
 */
describe('README snippets', () => {
  const root = resolve(__dirname, '..');
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const snippets = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);

  it('has TypeScript snippets', () => {
    expect(snippets.length).toBeGreaterThan(5);
  });

  it('compiles every TypeScript snippet', () => {
    const dir = mkdtempSync(join(root, 'test', '.readme-'));
    try {
      const files = snippets.map((code, i) => {
        const file = join(dir, `snippet-${i + 1}.ts`);
        // Each snippet is its own module even when it has no import.
        writeFileSync(file, `${code}\nexport {};\n`);
        return file;
      });
      const config = ts.readConfigFile(join(root, 'tsconfig.json'), ts.sys.readFile);
      const parsed = ts.parseJsonConfigFileContent(config.config, ts.sys, root);
      const program = ts.createProgram(files, {
        ...parsed.options,
        noEmit: true,
        noUnusedLocals: false,
      });
      const diagnostics = ts
        .getPreEmitDiagnostics(program)
        .filter((d) => d.file && files.includes(resolve(d.file.fileName)));
      const messages = diagnostics.map((d) => {
        const { line } = d.file!.getLineAndCharacterOfPosition(d.start ?? 0);
        return `${d.file!.fileName.split('/').pop()}:${line + 1} ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
      });
      expect(messages).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
