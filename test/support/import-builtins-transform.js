/* global module */
/**
 * A Jest transform for PGlite's CommonJS build (test/stores/sql/pglite-*): it loads Node
 * built-ins (`fs`, `zlib`, `node:module`, …) with `import()`, which Jest's VM refuses without
 * --experimental-vm-modules. Each `import("<name>")` becomes a `require` of the same module.
 * TypeScript's CommonJS output cannot do this: PGlite declares its own `var require` in the same
 * function, which shadows the module's.
 */
module.exports = {
  process(source) {
    return {
      code:
        'const __requireBuiltin = require;\n' +
        source.replace(/\bimport\(("[\w:/]+")\)/g, 'Promise.resolve(__requireBuiltin($1))'),
    };
  },
};
