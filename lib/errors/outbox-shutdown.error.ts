import { OutboxError } from './outbox.error';

/** Reason given to a handler's signal when the application shuts down under it. */
export class OutboxShutdownError extends OutboxError {
  constructor() {
    super('The application is shutting down');
  }
}
