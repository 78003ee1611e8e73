export * from './outbox.error';
export * from './outbox-validation.error';
export * from './duplicate-event.error';
export * from './lease-lost.error';
export * from './outbox-options.error';
export * from './non-retryable.error';
export * from './missing-dependency.error';
export * from './handler-timeout.error';
