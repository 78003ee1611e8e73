import { ConfigurableModuleBuilder, DynamicModule } from '@nestjs/common';
import { assertInstalled } from '../optional-peers';
import {
  OutboxAdminModuleExtras,
  OutboxAdminModuleOptions,
} from './outbox-admin-options.interface';
import { OUTBOX_ADMIN_DEFAULT_PATH, OUTBOX_ADMIN_PATH } from './outbox-admin.constants';

/**
 * The controller's DTOs need class-validator and class-transformer, optional peers; requiring them
 * only here keeps apps that never mount the admin API free of them.
 */
function loadController(): typeof import('./outbox-admin.controller') {
  assertInstalled('OutboxAdminModule', ['class-validator', 'class-transformer']);
  return require('./outbox-admin.controller') as typeof import('./outbox-admin.controller');
}

function mount(definition: DynamicModule, extras: Partial<OutboxAdminModuleExtras>): DynamicModule {
  const path = extras.path ?? OUTBOX_ADMIN_DEFAULT_PATH;
  const { createOutboxAdminController } = loadController();
  // registerAsync already put its own imports here; register() brings them as an extra.
  const imports = [...new Set([...(definition.imports ?? []), ...(extras.imports ?? [])])];
  return {
    ...definition,
    imports,
    controllers: [...(definition.controllers ?? []), createOutboxAdminController(path)],
    providers: [...(definition.providers ?? []), { provide: OUTBOX_ADMIN_PATH, useValue: path }],
  };
}

export const {
  ConfigurableModuleClass: OutboxAdminConfigurableModule,
  MODULE_OPTIONS_TOKEN: OUTBOX_ADMIN_MODULE_OPTIONS,
  OPTIONS_TYPE: OUTBOX_ADMIN_OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE: OUTBOX_ADMIN_ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<OutboxAdminModuleOptions>()
  .setClassMethodName('register')
  .setFactoryMethodName('createOutboxAdminOptions')
  .setExtras<Partial<OutboxAdminModuleExtras>>(
    { path: OUTBOX_ADMIN_DEFAULT_PATH, imports: [] },
    mount,
  )
  .build();
