import { OutboxError } from './outbox.error';

/** `OutboxAdminModule` options are invalid or unsafe; raised at bootstrap. */
export class OutboxAdminOptionsError extends OutboxError {
  constructor(
    readonly field: string,
    readonly reason: string,
  ) {
    super(`Invalid OutboxAdminModule option "${field}": ${reason}`);
  }
}
