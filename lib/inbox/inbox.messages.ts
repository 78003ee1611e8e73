/** Log text of the inbox, kept in one place. */
export const InboxMessages = {
  duplicate: (consumer: string, messageId: string) =>
    `Inbox: ${consumer} already processed message ${messageId}; skipped`,
  cleanupDone: (table: string, deleted: number, batches: number) =>
    `Inbox retention removed ${deleted} record(s) from ${table} in ${batches} batch(es)`,
  cleanupSkipped: (table: string) =>
    `Inbox retention on ${table} skipped: another process holds the cleanup lock`,
  cleanupFailed: (table: string, error: unknown) =>
    `Inbox retention on ${table} failed: ${describe(error)}`,
  notConfigured: (where: string) =>
    `@Inbox() on ${where} has no DataSource: configure InboxModule.forRoot({ dataSource | executor }) or OutboxModule.forRoot({ inbox: { dataSource | executor } }), ` +
    "use the 'typeorm' or 'sql' store, or pass @Inbox({ dataSource: token }) or @Inbox({ executor })",
  moduleMissing: () =>
    '@Inbox() needs InboxModule or OutboxModule: import InboxModule.forRoot({ dataSource }) (consumers only) ' +
    'or OutboxModule.forRoot({ …, inbox: { … } }) in the application',
  dataSourceNotFound: (where: string, token: unknown) =>
    `@Inbox() on ${where}: no provider for DataSource token ${describeToken(token)}`,
  notADataSource: (where: string) =>
    `@Inbox() on ${where}: the dataSource is not a TypeORM DataSource`,
  notInitialized: (where: string) =>
    `@Inbox() on ${where}: the TypeORM DataSource is not initialized (call dataSource.initialize() or let @nestjs/typeorm do it)`,
  managerOnOutboxHandler: (where: string) =>
    `@InboxManager() on ${where} cannot work: outbox handlers are called with (event, context) only. ` +
    'Inject InboxContext and use inboxContext.manager instead.',
  txOnOutboxHandler: (where: string) =>
    `@InboxTx() on ${where} cannot work: outbox handlers are called with (event, context) only. ` +
    'Inject InboxContext and use inboxContext.tx instead.',
  notAnExecutor: (where: string) =>
    `@Inbox() on ${where}: executor is not an executor; pass pgExecutor(pool), drizzleExecutor(db) or kyselyExecutor(db)`,
  badConsumer: (where: string, reason: string) => `@Inbox() on ${where}: consumer ${reason}`,
  badIsolationLevel: (where: string, value: unknown) =>
    `@Inbox() on ${where}: isolationLevel ${JSON.stringify(value)} is not READ UNCOMMITTED, READ COMMITTED, REPEATABLE READ or SERIALIZABLE`,
  badLockTimeout: (where: string, value: unknown) =>
    `@Inbox() on ${where}: lockTimeoutMs ${JSON.stringify(value)} is not a whole number of milliseconds from 1 to 2147483647`,
  refused: (consumer: string, reason: string, rejected: boolean) =>
    `@Inbox() on ${consumer} refused a message: ${reason}; ` +
    (rejected
      ? 'rejected to the broker (nack without requeue: its dead-letter exchange receives it)'
      : 'the error goes to the transport (set @Inbox({ noAck: false }) with a manual-ack RabbitMQ consumer to dead-letter it)'),
  badNoAck: (where: string) => `@Inbox() on ${where}: noAck must be a boolean`,
  badHook: (where: string, name: string) =>
    `@Inbox() on ${where}: ${name} must be a function (request, context) => value` +
    (name === 'fingerprint' ? ' or false' : ''),
  badMessageIdSource: (where: string) =>
    `@Inbox() on ${where}: messageId must be { header: string }, { path: string } or a function (context) => string`,
};

function describe(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}

function describeToken(token: unknown): string {
  if (typeof token === 'function') return token.name;
  return String(token);
}
