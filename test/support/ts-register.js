/* global require, __dirname, process */
/**
 * `-r` hook for the test's child processes: compiles `.ts` files outside node_modules as
 * `ts-node/register/transpile-only` does (TypeScript's transpileModule with tsconfig.json's
 * compiler options: no type check), and keeps each output on disk, keyed by a hash of the
 * TypeScript version, the options, the file name and its source. A test run starts a few dozen
 * processes that load the same ~120 files of lib/; only the first one pays for compiling them,
 * and a process whose files are all cached does not even load TypeScript.
 */
'use strict';
const { createHash } = require('node:crypto');
const fs = require('node:fs');
const Module = require('node:module');
const { dirname, join, resolve, sep } = require('node:path');

const ROOT = resolve(__dirname, '..', '..');
const CACHE = process.env.OUTBOX_TS_CACHE || join(ROOT, 'node_modules', '.cache', 'outbox-test-ts');
const TS_VERSION = require('typescript/package.json').version;

/** Besides the source and file name, what the output depends on: TypeScript and tsconfig.json. */
const projectFile = resolve(ROOT, process.env.TS_NODE_PROJECT || 'tsconfig.json');
const projectText = fs.readFileSync(projectFile, 'utf8');

let compilerOptions = null;
function options() {
  if (compilerOptions) return compilerOptions;
  const ts = require('typescript');
  const { config, error } = ts.readConfigFile(projectFile, ts.sys.readFile);
  if (error) throw new Error(ts.flattenDiagnosticMessageText(error.messageText, '\n'));
  const parsed = ts.parseJsonConfigFileContent(config, ts.sys, dirname(projectFile));
  // As ts-node: emit to memory, source maps inline, no declarations.
  compilerOptions = {
    ...parsed.options,
    sourceMap: false,
    inlineSourceMap: true,
    inlineSources: true,
    declaration: false,
    declarationMap: false,
    noEmit: false,
    emitDeclarationOnly: false,
  };
  return compilerOptions;
}

function compile(source, filename) {
  const key = createHash('sha256')
    .update(`${TS_VERSION}\0${projectFile}\0${projectText}\0${filename}\0`)
    .update(source)
    .digest('hex');
  const cached = join(CACHE, `${key}.js`);
  try {
    return fs.readFileSync(cached, 'utf8');
  } catch {
    // not cached yet
  }
  const ts = require('typescript');
  const out = ts.transpileModule(source, {
    fileName: filename,
    compilerOptions: options(),
    reportDiagnostics: false,
  }).outputText;
  try {
    fs.mkdirSync(CACHE, { recursive: true });
    // Several processes may compile the same file at once: write aside, then rename.
    const tmp = `${cached}.${process.pid}.tmp`;
    fs.writeFileSync(tmp, out);
    fs.renameSync(tmp, cached);
  } catch {
    // A cache that cannot be written only costs time.
  }
  return out;
}

const jsLoader = Module._extensions['.js'];
Module._extensions['.ts'] = function (module, filename) {
  // As ts-node: files under node_modules are not compiled.
  if (filename.includes(`${sep}node_modules${sep}`)) return jsLoader(module, filename);
  const source = fs.readFileSync(filename, 'utf8');
  module._compile(compile(source, filename), filename);
};
process.setSourceMapsEnabled?.(true);
