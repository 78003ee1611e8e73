/** Injection token of the admin options after defaults and checks. */
export const OUTBOX_ADMIN_RESOLVED_OPTIONS = Symbol('OUTBOX_ADMIN_RESOLVED_OPTIONS');
/** Most dead-letter ids one bulk request may name. */
export const OUTBOX_ADMIN_MAX_IDS = 1_000;
/** Ceiling of `limits.maxPageSize`. */
export const OUTBOX_ADMIN_PAGE_SIZE_CEILING = 1_000;
/** Default route prefix. */
export const OUTBOX_ADMIN_DEFAULT_PATH = 'outbox';
/** Injection token of the route prefix the controller was registered with. */
export const OUTBOX_ADMIN_PATH = Symbol('OUTBOX_ADMIN_PATH');
