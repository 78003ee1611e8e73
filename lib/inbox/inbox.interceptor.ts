import {
  BadRequestException,
  CallHandler,
  ConflictException,
  ExecutionContext,
  Injectable,
  Logger,
  NestInterceptor,
  UnprocessableEntityException,
} from '@nestjs/common';
import { ModuleRef, Reflector } from '@nestjs/core';
import { defer, from, lastValueFrom, mergeAll, Observable, of, toArray } from 'rxjs';
import { IdempotencyKeyReusedError } from '../errors/idempotency-key-reused.error';
import { InboxInProgressError } from '../errors/inbox-in-progress.error';
import { InboxMessageIdError } from '../errors/inbox-message-id.error';
import { INBOX_METADATA } from './inbox.constants';
import { runInInboxScope } from './inbox.context';
import { InboxMessages } from './inbox.messages';
import { consumerName, MissingMessageId, normalizeKey, resolveMessageId } from './inbox-message-id';
import { InboxOptions } from './inbox-options.interface';
import { InboxService } from './inbox.service';
import { httpRequestKey } from './inbox-request-key';

/**
 * Applied by `@Inbox()`. It depends only on `ModuleRef` and `Reflector`, which every module can
 * inject, so consumers work in any module without re-importing OutboxModule.
 */
@Injectable()
export class InboxInterceptor implements NestInterceptor {
  private service: InboxService | null = null;
  private readonly logger = new Logger('OutboxInbox');

  constructor(
    private readonly moduleRef: ModuleRef,
    private readonly reflector: Reflector,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return defer(() => {
      // With the tracing option, the consumer continues the trace its message carries.
      const tracing = this.inbox().tracing;
      if (!tracing) return this.process(context, next);
      const options =
        this.reflector.get<InboxOptions | undefined>(INBOX_METADATA, context.getHandler()) ?? {};
      return tracing.continueFrom(messageHeaders(context), consumerName(context, options), () =>
        this.process(context, next),
      );
    }).pipe(mergeAll());
  }

  private async process(
    context: ExecutionContext,
    next: CallHandler,
  ): Promise<Observable<unknown>> {
    const options =
      this.reflector.get<InboxOptions | undefined>(INBOX_METADATA, context.getHandler()) ?? {};
    const name = consumerName(context, options);
    const consumer = normalizeKey(name, 'the consumer name');
    if (consumer instanceof MissingMessageId) {
      throw this.refuse(context, options, name, consumer.reason);
    }
    const messageId = resolveMessageId(context, options);
    if (messageId instanceof MissingMessageId) {
      throw this.refuse(context, options, consumer, messageId.reason);
    }

    const { recordId, fingerprint } = await httpRequestKey(context, options, messageId);
    const result = await this.inbox()
      .run(
        { consumer, messageId: recordId },
        // The handler may return an Observable (microservice replies, streams): all of its values
        // are collected inside the transaction so nothing runs after the commit, then replayed.
        (tx: unknown, client) =>
          runInInboxScope({ tx, client, consumer, messageId }, () =>
            lastValueFrom(next.handle().pipe(toArray())),
          ),
        { ...options, fingerprint },
      )
      .catch((error: unknown) => {
        if (error instanceof IdempotencyKeyReusedError && context.getType<string>() === 'http') {
          throw new UnprocessableEntityException(
            'This idempotency key was already used for a different request; send a new key',
            { cause: error },
          );
        }
        // IETF idempotency-key draft: a request whose key is still being processed gets 409.
        if (error instanceof InboxInProgressError && context.getType<string>() === 'http') {
          throw new ConflictException(
            'A request with this idempotency key is still being processed; retry later',
            { cause: error },
          );
        }
        throw error;
      });
    if (!result.duplicate) return from(result.value);
    // The method, which would have acknowledged it, did not run.
    if (options.noAck === false) rabbitMessage(context)?.ack();
    const duplicate =
      typeof options.duplicateResult === 'function'
        ? await options.duplicateResult(context)
        : options.duplicateResult;
    return of(duplicate);
  }

  private inbox(): InboxService {
    if (this.service) return this.service;
    let service: InboxService;
    try {
      service = this.moduleRef.get(InboxService, { strict: false });
    } catch {
      throw new Error(InboxMessages.moduleMissing());
    }
    return (this.service = service);
  }

  /**
   * A message without a usable id fails in the words of its transport. Clients see only the
   * reason, not the consumer's class and method names.
   */
  private refuse(
    context: ExecutionContext,
    options: InboxOptions,
    consumer: string,
    reason: string,
  ): Error {
    const error = new InboxMessageIdError(consumer, reason);
    switch (context.getType<string>()) {
      case 'http':
        return new BadRequestException(reason, { cause: error });
      case 'rpc': {
        // An event has no caller to answer: without this line and the nack, a RabbitMQ message
        // without an id vanished silently (acked by noAck, or left unacked forever).
        const message = options.noAck === false ? rabbitMessage(context) : undefined;
        message?.nack();
        this.logger.error(InboxMessages.refused(consumer, reason, message !== undefined));
        const { RpcException } =
          require('@nestjs/microservices') as typeof import('@nestjs/microservices');
        return new RpcException(reason);
      }
      default:
        return error;
    }
  }
}

/**
 * The headers a message carries, whatever its transport: HTTP request headers, RabbitMQ
 * properties, Kafka headers, NATS headers, MQTT 5 user properties, an outbox event's headers.
 */
export function messageHeaders(context: ExecutionContext): object | undefined {
  const type = context.getType<string>();
  if (type === 'http') {
    return (context.switchToHttp().getRequest() as { headers?: object } | undefined)?.headers;
  }
  if (type === 'rpc') {
    const transport = context.switchToRpc().getContext() as Record<string, unknown> | undefined;
    const call = (name: string): unknown =>
      typeof transport?.[name] === 'function' ? (transport[name] as () => unknown)() : undefined;
    const nats = call('getHeaders');
    if (nats && typeof nats === 'object') return nats;
    const message = call('getMessage') as
      { properties?: { headers?: object }; headers?: object } | undefined;
    if (message?.properties?.headers) return message.properties.headers;
    if (message?.headers && typeof message.headers === 'object') return message.headers;
    const packet = call('getPacket') as { properties?: { userProperties?: object } } | undefined;
    return packet?.properties?.userProperties;
  }
  const event = context.getArgs()[0] as { headers?: unknown } | undefined;
  return event && typeof event.headers === 'object' ? (event.headers as object) : undefined;
}

/** The RabbitMQ message being handled, with its channel's ack / nack; undefined elsewhere. */
function rabbitMessage(context: ExecutionContext): { ack(): void; nack(): void } | undefined {
  if (context.getType<string>() !== 'rpc') return undefined;
  const transport = context.switchToRpc().getContext() as Record<string, unknown> | undefined;
  if (
    typeof transport?.getChannelRef !== 'function' ||
    typeof transport.getMessage !== 'function'
  ) {
    return undefined;
  }
  const channel = transport.getChannelRef() as {
    ack(message: unknown): void;
    nack(message: unknown, allUpTo: boolean, requeue: boolean): void;
  };
  const message = transport.getMessage();
  return {
    ack: () => channel.ack(message),
    nack: () => channel.nack(message, false, false),
  };
}
