import { CanActivate, ModuleMetadata, Type } from '@nestjs/common';

/** A guard for the admin routes: a class (resolved through Nest DI) or a ready instance. */
export type OutboxAdminGuard = CanActivate | Type<CanActivate>;

/** Request limits of the admin routes. */
export interface OutboxAdminLimits {
  /** Largest `limit` a dead-letter page may ask for; at most 1,000. @default 100 */
  maxPageSize: number;
  /** Page size when the request gives no `limit`; at most `maxPageSize`. @default 50 */
  defaultPageSize: number;
  /**
   * Largest request body, in bytes. The application's own body parser limit (Express: 100 KiB)
   * still applies first. @default 65536
   */
  maxBodyBytes: number;
}

/** Options of `OutboxAdminModule.register()` / `registerAsync()` (the factory's return value). */
export interface OutboxAdminModuleOptions {
  /**
   * Guards run, in order, before every admin route; all must allow the request. Required unless
   * `allowUnauthenticated` is true.
   */
  guards?: OutboxAdminGuard[];
  /**
   * Mount the routes with no guard at all. Meant for local tools only; a warning is logged at
   * every start. @default false
   */
  allowUnauthenticated?: boolean;
  limits?: Partial<OutboxAdminLimits>;
}

/** Options fixed when the module is declared (also accepted by `registerAsync`). */
export interface OutboxAdminModuleExtras {
  /** Route prefix of the admin controller, relative to any `RouterModule` path. @default 'outbox' */
  path: string;
  /** Modules the guards' dependencies come from (`register()` only; `registerAsync` has its own). @default [] */
  imports?: ModuleMetadata['imports'];
  /**
   * Also serve the dead-letter dashboard, a page at `<path>/ui` with its script and stylesheet,
   * behind the same guards as the API. @default false
   */
  ui?: boolean;
}

export interface ResolvedOutboxAdminOptions {
  guards: OutboxAdminGuard[];
  allowUnauthenticated: boolean;
  limits: OutboxAdminLimits;
}
