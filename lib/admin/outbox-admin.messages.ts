/** Log text of the admin API, kept in one place. */
export const OutboxAdminMessages = {
  unauthenticated: (path: string) =>
    `OutboxAdminModule is mounted at "${path}" WITHOUT any guard (allowUnauthenticated: true): ` +
    'anyone who can reach this server can replay and delete dead letters. Use it for local tools only.',
  requestFailed: (route: string, error: unknown) =>
    `Admin request ${route} failed: ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`,
  missingOutboxModule: () =>
    'OutboxAdminModule needs the outbox store: import OutboxModule.forRoot() (or forRootAsync()) in the application.',
};
