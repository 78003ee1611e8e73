import { timingSafeEqual } from 'node:crypto';
import { CanActivate, ExecutionContext, Injectable } from '@nestjs/common';

/** Lets a request through when its `x-admin-key` header equals SAMPLE_ADMIN_KEY. */
@Injectable()
export class AdminKeyGuard implements CanActivate {
  static readonly key = process.env.SAMPLE_ADMIN_KEY ?? 'sample-admin-key';

  canActivate(context: ExecutionContext): boolean {
    const given = Buffer.from(
      String(context.switchToHttp().getRequest().headers['x-admin-key'] ?? ''),
    );
    const expected = Buffer.from(AdminKeyGuard.key);
    return given.length === expected.length && timingSafeEqual(given, expected);
  }
}
