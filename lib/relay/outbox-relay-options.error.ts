import { OutboxError } from '../errors/outbox.error';

/** `OutboxRelayModule.register()` got invalid options; raised at bootstrap, `field` names the option. */
export class OutboxRelayOptionsError extends OutboxError {
  constructor(
    readonly field: string,
    readonly reason: string,
  ) {
    super(`Invalid OutboxRelayModule option "${field}": ${reason}`);
  }
}
