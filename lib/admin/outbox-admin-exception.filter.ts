import {
  ArgumentsHost,
  Catch,
  ExceptionFilter,
  HttpException,
  HttpStatus,
  Logger,
} from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { OutboxValidationError } from '../errors/outbox-validation.error';
import { OutboxAdminMessages } from './outbox-admin.messages';

/**
 * Keeps error bodies to status and message: a store error can carry SQL, keys or a stack, which
 * are logged here and never sent.
 */
@Catch()
export class OutboxAdminExceptionFilter implements ExceptionFilter {
  private readonly logger = new Logger('OutboxAdmin');

  constructor(private readonly adapterHost: HttpAdapterHost) {}

  catch(exception: unknown, host: ArgumentsHost): void {
    const { httpAdapter } = this.adapterHost;
    const http = host.switchToHttp();
    const response = http.getResponse<unknown>();
    const [status, body] = this.toResponse(exception, http.getRequest<unknown>());
    httpAdapter.setHeader(response, 'Cache-Control', 'no-store');
    httpAdapter.reply(response, body, status);
  }

  private toResponse(exception: unknown, request: unknown): [number, object] {
    if (exception instanceof HttpException) {
      const response = exception.getResponse();
      const status = exception.getStatus();
      return [
        status,
        typeof response === 'object' ? response : { statusCode: status, message: response },
      ];
    }
    if (exception instanceof OutboxValidationError) {
      return [
        HttpStatus.BAD_REQUEST,
        { statusCode: 400, error: 'Bad Request', message: exception.message },
      ];
    }
    const route = this.describeRoute(request);
    this.logger.error(
      OutboxAdminMessages.requestFailed(route, exception),
      exception instanceof Error ? exception.stack : undefined,
    );
    return [
      HttpStatus.INTERNAL_SERVER_ERROR,
      {
        statusCode: 500,
        error: 'Internal Server Error',
        message: 'The outbox admin request failed; see the server log',
      },
    ];
  }

  private describeRoute(request: unknown): string {
    const { httpAdapter } = this.adapterHost;
    try {
      return `${httpAdapter.getRequestMethod(request)} ${httpAdapter.getRequestUrl(request)}`;
    } catch {
      return '(unknown route)';
    }
  }
}
