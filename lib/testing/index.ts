export * from './outbox-store-contract';
