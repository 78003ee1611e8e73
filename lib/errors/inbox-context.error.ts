import { OutboxError } from './outbox.error';

/**
 * The inbox transaction was asked for outside an `@Inbox()` method, or its TypeORM manager was
 * asked of an inbox that runs on another client (`client`).
 */
export class InboxContextError extends OutboxError {
  constructor(readonly client?: string) {
    super(
      client === undefined
        ? 'No inbox transaction is active here: InboxContext and @InboxManager() work only while an @Inbox() method runs ' +
            '(and in code it awaits). Put @Inbox() on the consumer method.'
        : `This inbox runs on ${client}, not TypeORM, so it has no EntityManager: use @InboxTx() or ` +
            `InboxContext.tx, the ${client} transaction object the inbox opened.`,
    );
  }
}
