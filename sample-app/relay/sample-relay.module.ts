import { DynamicModule, Module } from '@nestjs/common';
import { OutboxRelayModule } from 'nestjs-outbox';
import { sampleBroker } from './broker.config';

/**
 * Relays `player.created` and `player.scored` to the broker named by SAMPLE_BROKER; without it,
 * nothing (the sample then needs SQLite only). The relay is one more outbox handler, next to
 * WelcomeHandler: each has its own deliveries, retries and dead letters.
 */
@Module({})
export class SampleRelayModule {
  static fromEnv(env: NodeJS.ProcessEnv = process.env): DynamicModule {
    const broker = sampleBroker(env);
    if (!broker) return { module: SampleRelayModule };
    return {
      module: SampleRelayModule,
      imports: [
        OutboxRelayModule.register({
          name: 'sample.relay',
          client: broker.client,
          types: ['player.created', 'player.scored'],
        }),
      ],
    };
  }
}
