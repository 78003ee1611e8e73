/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  rootDir: '.',
  roots: ['<rootDir>/test'],
  testRegex: '.*\\.(spec|e2e-spec)\\.ts$',
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json' }],
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
  setupFiles: ['reflect-metadata'],
  globalSetup: '<rootDir>/test/support/global-setup.ts',
};
