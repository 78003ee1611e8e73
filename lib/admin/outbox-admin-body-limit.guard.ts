import {
  CanActivate,
  ExecutionContext,
  Inject,
  Injectable,
  PayloadTooLargeException,
} from '@nestjs/common';
import { ResolvedOutboxAdminOptions } from './outbox-admin-options.interface';
import { OUTBOX_ADMIN_RESOLVED_OPTIONS } from './outbox-admin.constants';

interface RequestLike {
  headers: Record<string, string | string[] | undefined>;
  body?: unknown;
  rawBody?: Buffer;
}

/**
 * The app's body parser has already read the body by the time any route code runs, so the admin
 * limit is enforced here, before validation: on the declared length, the raw body when the app
 * keeps it (`rawBody: true`), else the parsed body re-serialized (chunked uploads).
 */
@Injectable()
export class OutboxAdminBodyLimitGuard implements CanActivate {
  constructor(
    @Inject(OUTBOX_ADMIN_RESOLVED_OPTIONS) private readonly options: ResolvedOutboxAdminOptions,
  ) {}

  canActivate(context: ExecutionContext): boolean {
    const max = this.options.limits.maxBodyBytes;
    const request = context.switchToHttp().getRequest<RequestLike>();
    if (bodySize(request) > max) {
      throw new PayloadTooLargeException(`request body is larger than ${max} bytes`);
    }
    return true;
  }
}

function bodySize(request: RequestLike): number {
  const declared = Number(request.headers['content-length']);
  if (Number.isFinite(declared) && declared > 0) return declared;
  if (Buffer.isBuffer(request.rawBody)) return request.rawBody.length;
  if (request.body === undefined || request.body === null) return 0;
  if (typeof request.body === 'string') return Buffer.byteLength(request.body);
  try {
    return Buffer.byteLength(JSON.stringify(request.body) ?? '');
  } catch {
    return 0;
  }
}
