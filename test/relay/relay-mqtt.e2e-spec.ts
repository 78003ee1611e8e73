import { describeWithService } from '../support/services';
import { relaySuite } from './relay.suite';

describeWithService('mqtt', 'OutboxRelayModule over MQTT (QoS 1 PUBACK)', () => relaySuite('mqtt'));
