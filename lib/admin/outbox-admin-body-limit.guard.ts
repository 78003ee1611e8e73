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
 * keeps it (`rawBody: true`), else (a chunked upload) the length of the parsed body as JSON,
 * counted without recursion and only until it passes the limit.
 */
@Injectable()
export class OutboxAdminBodyLimitGuard implements CanActivate {
  constructor(
    @Inject(OUTBOX_ADMIN_RESOLVED_OPTIONS) private readonly options: ResolvedOutboxAdminOptions,
  ) {}

  canActivate(context: ExecutionContext): boolean {
    const max = this.options.limits.maxBodyBytes;
    const request = context.switchToHttp().getRequest<RequestLike>();
    if (bodySize(request, max) > max) {
      throw new PayloadTooLargeException(`request body is larger than ${max} bytes`);
    }
    return true;
  }
}

function bodySize(request: RequestLike, max: number): number {
  const declared = Number(request.headers['content-length']);
  if (Number.isFinite(declared) && declared > 0) return declared;
  if (Buffer.isBuffer(request.rawBody)) return request.rawBody.length;
  if (typeof request.body === 'string') return Buffer.byteLength(request.body);
  return jsonSize(request.body, max);
}

/**
 * Bytes of `JSON.stringify(value)`, counted with an explicit stack: `JSON.stringify` itself
 * recurses, and a body nested tens of thousands of levels deep overflowed it (counted as 0 bytes,
 * so it passed). Stops once past `max`, so the work is bounded by the limit, not by the body.
 */
function jsonSize(value: unknown, max: number): number {
  let size = 0;
  const pending: unknown[] = [value];
  while (pending.length > 0 && size <= max) {
    const next = pending.pop();
    if (next === undefined) continue;
    if (next === null || typeof next !== 'object') {
      size += Buffer.byteLength(JSON.stringify(next) ?? 'null');
      continue;
    }
    const isArray = Array.isArray(next);
    const entries = Object.entries(next);
    // Brackets and commas, then each key with its colon.
    size += 2 + Math.max(entries.length - 1, 0);
    for (const [key, child] of entries) {
      if (!isArray) size += Buffer.byteLength(JSON.stringify(key)) + 1;
      pending.push(child === undefined ? null : child);
      if (size > max) break;
    }
  }
  return size;
}
