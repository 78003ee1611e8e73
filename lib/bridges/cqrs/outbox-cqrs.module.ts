import { DynamicModule, Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { OptionKeys, plainObject, refuseUnknownKeys } from '../../option-fields';
import { OutboxOptionsError } from '../../errors/outbox-options.error';
import { assertInstalled } from '../../optional-peers';
import { OutboxCqrsBridge } from './outbox-cqrs.bridge';
import { OUTBOX_CQRS_OPTIONS, OutboxCqrsModuleOptions } from './outbox-cqrs.options';

const KEYS = { allEvents: true, key: true } satisfies OptionKeys<OutboxCqrsModuleOptions>;

/**
 * Sends `@nestjs/cqrs` events through the outbox (docs/domain-events.md): import it next to
 * `CqrsModule.forRoot()` and `OutboxModule.forRoot()`. Loads `@nestjs/cqrs` only when imported.
 */
@Module({})
export class OutboxCqrsModule {
  static forRoot(options: OutboxCqrsModuleOptions = {}): DynamicModule {
    assertInstalled('OutboxCqrsModule', ['@nestjs/cqrs']);
    const resolved = plainObject('OutboxCqrsModule options', options) as OutboxCqrsModuleOptions;
    refuseUnknownKeys('OutboxCqrsModule options', resolved, KEYS);
    if (resolved.allEvents !== undefined && typeof resolved.allEvents !== 'boolean') {
      throw new OutboxOptionsError('OutboxCqrsModule options.allEvents', 'expected true or false');
    }
    if (resolved.key !== undefined && typeof resolved.key !== 'function') {
      throw new OutboxOptionsError(
        'OutboxCqrsModule options.key',
        'expected a function (event, aggregate) => string | undefined',
      );
    }
    return {
      module: OutboxCqrsModule,
      imports: [DiscoveryModule],
      providers: [{ provide: OUTBOX_CQRS_OPTIONS, useValue: resolved }, OutboxCqrsBridge],
    };
  }
}
