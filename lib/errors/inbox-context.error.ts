import { OutboxError } from './outbox.error';

/** The inbox transaction was asked for outside an `@Inbox()` method. */
export class InboxContextError extends OutboxError {
  constructor() {
    super(
      'No inbox transaction is active here: InboxContext and @InboxManager() work only while an @Inbox() method runs ' +
        '(and in code it awaits). Put @Inbox() on the consumer method.',
    );
  }
}
