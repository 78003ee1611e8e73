import { timingSafeEqual } from 'node:crypto';
import { CanActivate, ExecutionContext, Injectable } from '@nestjs/common';
import { AdminSessions, readCookie } from './admin-sessions';

/** True when `given` equals `expected`, in time that does not depend on where they differ. */
export function sameSecret(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return b.length > 0 && a.length === b.length && timingSafeEqual(a, b);
}

/**
 * Lets a request through when its `x-admin-key` header equals SAMPLE_ADMIN_KEY (curl, a proxy) or
 * when it carries the cookie of a session opened by the sign-in form at /admin/sign-in (a browser).
 */
@Injectable()
export class AdminGuard implements CanActivate {
  static readonly key = process.env.SAMPLE_ADMIN_KEY ?? 'sample-admin-key';

  constructor(private readonly sessions: AdminSessions) {}

  canActivate(context: ExecutionContext): boolean {
    const { headers } = context.switchToHttp().getRequest<{ headers: Record<string, unknown> }>();
    const header = headers['x-admin-key'];
    if (typeof header === 'string') return sameSecret(header, AdminGuard.key);
    return this.sessions.isOpen(readCookie(headers.cookie, AdminSessions.cookie));
  }
}
