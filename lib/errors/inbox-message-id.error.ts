import { NonRetryableError } from './non-retryable.error';

/**
 * A consumer got a message without a usable id. The inbox never lets such a message through
 * unguarded: HTTP answers 400, microservices get an `RpcException`, and an outbox delivery is
 * dead-lettered at once (a retry cannot produce an id, hence non-retryable).
 */
export class InboxMessageIdError extends NonRetryableError {
  constructor(
    readonly consumer: string,
    readonly reason: string,
  ) {
    super(`@Inbox() on ${consumer}: ${reason}`);
  }
}
