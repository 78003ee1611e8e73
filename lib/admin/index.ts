export { OutboxAdminModule } from './outbox-admin.module';
export { OUTBOX_ADMIN_MODULE_OPTIONS } from './outbox-admin.module-definition';

export { OUTBOX_ADMIN_MAX_IDS } from './outbox-admin.constants';
export type {
  OutboxAdminGuard,
  OutboxAdminLimits,
  OutboxAdminModuleOptions,
  OutboxAdminModuleExtras,
} from './outbox-admin-options.interface';
// Type-only: the controller (and its DTOs) load class-validator, which only OutboxAdminModule.register() requires.
export type { OutboxAdminController } from './outbox-admin.controller';
export type {
  DeadLetterListItem,
  DeadLetterListResponse,
  DeadLetterSummaryResponse,
} from './outbox-admin.service';
