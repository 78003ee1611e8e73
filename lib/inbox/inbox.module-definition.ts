import { ConfigurableModuleBuilder } from '@nestjs/common';
import { OutboxInboxOptions } from './inbox-options.interface';

/** `InboxModule.forRoot(options)`: the inbox options of `OutboxModule.forRoot({ inbox })`. */
export type InboxModuleOptions = OutboxInboxOptions;

export const {
  ConfigurableModuleClass: InboxConfigurableModule,
  MODULE_OPTIONS_TOKEN: INBOX_MODULE_OPTIONS,
} = new ConfigurableModuleBuilder<InboxModuleOptions>()
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createInboxOptions')
  .setExtras({ isGlobal: false }, (definition, extras) => ({
    ...definition,
    global: extras.isGlobal,
  }))
  .build();
