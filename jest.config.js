/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  rootDir: '.',
  roots: ['<rootDir>/test'],
  testRegex: '.*\\.(spec|e2e-spec)\\.ts$',
  transform: {
    // Transpiled file by file, without a type checker per worker: `npm test` type-checks lib/, test/
    // and sample-app/ first, in one tsc pass (pretest: npm run typecheck). tsconfig.json applies.
    '^.+\\.ts$': ['ts-jest', { tsconfig: { isolatedModules: true } }],
    // kysely 0.29 ships ES modules only: compiled to CommonJS for Jest (Node loads it natively).
    '^.+/node_modules/kysely/.+\\.js$': [
      'ts-jest',
      { tsconfig: { allowJs: true, module: 'commonjs', target: 'es2022' }, isolatedModules: true },
    ],
    // PGlite's CommonJS build loads Node built-ins with import(): see the transform.
    '^.+/node_modules/@electric-sql/pglite/dist/.+\\.cjs$':
      '<rootDir>/test/support/import-builtins-transform.js',
  },
  transformIgnorePatterns: ['/node_modules/(?!kysely/|@electric-sql/pglite/)'],
  moduleFileExtensions: ['ts', 'js', 'json'],
  moduleNameMapper: {
    '^nestjs-outbox$': '<rootDir>/lib/index.ts',
    '^nestjs-outbox/testing$': '<rootDir>/lib/testing/index.ts',
  },
  testTimeout: 30000,
  // Two files at a time (each file has its own table and key prefixes): most of a suite's time is
  // spent waiting on a database, a broker or a child process. The race and scale suites' time
  // bounds hold with two workers on a loaded two-core machine; `--runInBand` still works.
  maxWorkers: 2,
  setupFiles: ['reflect-metadata'],
  globalSetup: '<rootDir>/test/support/global-setup.ts',
};
