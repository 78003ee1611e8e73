import { describeWithService } from '../support/services';
import { relaySuite } from './relay.suite';

describeWithService('nats', 'OutboxRelayModule over NATS (JetStream PubAck)', () =>
  relaySuite('nats'),
);
