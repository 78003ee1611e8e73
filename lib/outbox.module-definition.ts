import { ConfigurableModuleBuilder } from '@nestjs/common';
import { OutboxModuleOptions } from './interfaces/outbox-module-options.interface';

export const {
  ConfigurableModuleClass: OutboxConfigurableModule,
  MODULE_OPTIONS_TOKEN: OUTBOX_MODULE_OPTIONS,
  OPTIONS_TYPE: OUTBOX_OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE: OUTBOX_ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<OutboxModuleOptions>()
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createOutboxOptions')
  .setExtras({ isGlobal: false }, (definition, extras) => ({
    ...definition,
    global: extras.isGlobal,
  }))
  .build();
