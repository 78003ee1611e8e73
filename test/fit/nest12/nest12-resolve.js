/* global require, __dirname */
/*
 * Preloaded (`node -r`) into the NestJS 12 fixture: every `require('@nestjs/…')` made by CommonJS
 * code — the library's (lib/, transpiled on the fly) and the fixture's — resolves to the
 * NestJS 12 packages installed next to this file, as if the app had installed NestJS 12 itself.
 * NestJS 12 is ESM-only: Node 20.19+ loads it through require(esm), and its own `import`s resolve
 * from where it is installed. Everything else (typeorm, drivers, rxjs, reflect-metadata,
 * class-validator) comes from the root install, as one copy.
 */
const Module = require('node:module');

const resolveFilename = Module._resolveFilename;
const here = [__dirname];
Module._resolveFilename = function (request, parent, isMain, options) {
  if (request.startsWith('@nestjs/')) {
    try {
      return resolveFilename.call(this, request, parent, isMain, { paths: here });
    } catch {
      // not one of the NestJS 12 packages installed here (e.g. @nestjs/testing): the root's
    }
  }
  return resolveFilename.call(this, request, parent, isMain, options);
};
