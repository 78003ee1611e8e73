import { describeWithService } from '../support/services';
import { relaySuite } from './relay.suite';

describeWithService('rabbitmq', 'OutboxRelayModule over RabbitMQ (publisher confirms)', () =>
  relaySuite('rabbitmq'),
);
