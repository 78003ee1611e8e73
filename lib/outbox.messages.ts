/** Log text, kept in one place. */
export const OutboxMessages = {
  requestScopedHandler: (source: string) =>
    `@OutboxHandler on ${source} is ignored: its provider is request-scoped (or depends on one). Handlers must live on singleton providers.`,
  dispatcherStarted: (workerId: string, handlers: number, types: number) =>
    `Dispatcher ${workerId} started with ${handlers} handler(s) for ${types} event type(s)`,
  noHandlers: () => 'Dispatcher has no @OutboxHandler methods to run; it will not claim anything',
  renewFailed: (deliveryId: string, error: unknown) =>
    `Lease renewal for delivery ${deliveryId} failed: ${describe(error)}`,
  shutdownTimeout: (inFlight: number, timeoutMs: number) =>
    `Shutdown: ${inFlight} handler(s) still running after ${timeoutMs} ms; aborting their signals and leaving their leases to expire`,
  releaseFailed: (deliveryId: string, error: unknown) =>
    `Could not release delivery ${deliveryId}: ${describe(error)}`,
  cleanupFailed: (error: unknown) => `Retention cleanup failed: ${describe(error)}`,
  cleanupDone: (events: number, deadLetters: number) =>
    `Retention cleanup removed ${events} event(s) and ${deadLetters} dead letter(s)`,
  wakeupFailed: (error: unknown) =>
    `Wake-up signal or subscription failed (${describe(error)}); polling continues, reconnecting`,
  bridgeAppendFailed: (types: string[], error: unknown) =>
    `Events ${types.join(', ')} published through EventBus were not appended (${describe(error)}); ` +
    'await eventBus.publish()/publishAll() to handle this in your code',
  missingScheduler: () =>
    'The outbox dispatcher needs @nestjs/schedule: add ScheduleModule.forRoot() to your root module imports ' +
    '(or set dispatcher.enabled: false in processes that only append).',
  schedulerNotInstalled: () =>
    'The outbox dispatcher needs @nestjs/schedule, which is not installed: npm install @nestjs/schedule, ' +
    'then add ScheduleModule.forRoot() to your root module imports ' +
    '(or set dispatcher.enabled: false in processes that only append).',
};

function describe(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}
