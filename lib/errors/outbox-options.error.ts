import { OutboxError } from './outbox.error';

/**
 * Module options are invalid; raised at bootstrap, `field` names the option path and the message
 * the module the options were given to (`OutboxModule`, or `InboxModule` for its `forRoot`).
 */
export class OutboxOptionsError extends OutboxError {
  constructor(
    readonly field: string,
    readonly reason: string,
    module = 'OutboxModule',
  ) {
    super(`Invalid ${module} option "${field}": ${reason}`);
  }
}
