import { OutboxError } from './outbox.error';

/** Module options are invalid; raised at bootstrap, `field` names the option path. */
export class OutboxOptionsError extends OutboxError {
  constructor(
    readonly field: string,
    readonly reason: string,
  ) {
    super(`Invalid OutboxModule option "${field}": ${reason}`);
  }
}
