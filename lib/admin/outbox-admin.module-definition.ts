import { ConfigurableModuleBuilder, DynamicModule } from '@nestjs/common';
import { OutboxAdminOptionsError } from '../errors/outbox-admin-options.error';
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

/** The dashboard's controller and the provider of its files, when `ui: true`. */
function dashboard(path: string, ui: unknown): Pick<DynamicModule, 'controllers' | 'providers'> {
  if (ui !== undefined && typeof ui !== 'boolean') {
    throw new OutboxAdminOptionsError('ui', `expected true or false, got ${JSON.stringify(ui)}`);
  }
  if (ui !== true) return { controllers: [], providers: [] };
  const { createOutboxAdminUiController } =
    require('./ui/outbox-admin-ui.controller') as typeof import('./ui/outbox-admin-ui.controller');
  const { DashboardAssets } =
    require('./ui/outbox-admin-ui.assets') as typeof import('./ui/outbox-admin-ui.assets');
  return {
    controllers: [createOutboxAdminUiController(path)],
    providers: [{ provide: DashboardAssets, useFactory: () => new DashboardAssets() }],
  };
}

function mount(definition: DynamicModule, extras: Partial<OutboxAdminModuleExtras>): DynamicModule {
  const path = extras.path ?? OUTBOX_ADMIN_DEFAULT_PATH;
  const { createOutboxAdminController } = loadController();
  const ui = dashboard(path, extras.ui);
  // registerAsync already put its own imports here; register() brings them as an extra.
  const imports = [...new Set([...(definition.imports ?? []), ...(extras.imports ?? [])])];
  return {
    ...definition,
    imports,
    controllers: [
      ...(definition.controllers ?? []),
      createOutboxAdminController(path),
      ...(ui.controllers ?? []),
    ],
    providers: [
      ...(definition.providers ?? []),
      { provide: OUTBOX_ADMIN_PATH, useValue: path },
      ...(ui.providers ?? []),
    ],
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
    { path: OUTBOX_ADMIN_DEFAULT_PATH, imports: [], ui: false },
    mount,
  )
  .build();
