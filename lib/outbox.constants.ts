/** Injection token of the active `OutboxStore`. */
export const OUTBOX_STORE = Symbol('OUTBOX_STORE');
/** Injection token of the resolved (defaulted, validated) module options. */
export const OUTBOX_RESOLVED_OPTIONS = Symbol('OUTBOX_RESOLVED_OPTIONS');
/** Metadata key written by `@OutboxHandler()`. */
export const OUTBOX_HANDLER_METADATA = 'outbox:handler';
/** Name of the dispatcher's poll interval in `@nestjs/schedule`'s `SchedulerRegistry`. */
export const OUTBOX_DISPATCHER_INTERVAL = 'nestjs-outbox:dispatcher';
/** Name of the cleanup interval in `SchedulerRegistry`. */
export const OUTBOX_CLEANUP_INTERVAL = 'nestjs-outbox:cleanup';
/** Execution context type under which outbox handlers run (`host.getType()`). */
export const OUTBOX_CONTEXT_TYPE = 'outbox';
/** Errors kept per delivery. */
export const OUTBOX_ERROR_HISTORY = 10;
/** Sentinel handler name of a delivery not yet expanded to concrete handlers. */
export const UNEXPANDED_HANDLER = '*';
/** Metadata key of a handler's parameter list (which argument gets the event, which the context). */
export const OUTBOX_ARGS_METADATA = 'outbox:args';
/** Parameter types in `OUTBOX_ARGS_METADATA`; the value is the argument's index in `getArgs()`. */
export enum OutboxParamtype {
  EVENT = 0,
  CONTEXT = 1,
}
