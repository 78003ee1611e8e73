import { CanActivate, ExecutionContext, ForbiddenException, Injectable } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { isObservable, lastValueFrom } from 'rxjs';
import { OutboxAdminService } from './outbox-admin.service';

/**
 * Runs the guards given to `OutboxAdminModule` in order. One guard on the controller, rather than
 * the user's guards in `@UseGuards`, lets `registerAsync` supply guards from a factory.
 */
@Injectable()
export class OutboxAdminAuthGuard implements CanActivate {
  constructor(
    private readonly admin: OutboxAdminService,
    private readonly adapterHost: HttpAdapterHost,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    // Set first so every answer, denial included, tells caches not to keep it.
    this.adapterHost.httpAdapter?.setHeader(
      context.switchToHttp().getResponse(),
      'Cache-Control',
      'no-store',
    );
    for (const guard of this.admin.guards) {
      const result = guard.canActivate(context);
      const allowed = isObservable(result)
        ? await lastValueFrom(result, { defaultValue: false })
        : await result;
      if (!allowed) throw new ForbiddenException('Forbidden resource');
    }
    return true;
  }
}
