export { OutboxListener } from './outbox-listener.decorator';
export type { OutboxListenerOptions } from './outbox-listener.decorator';
