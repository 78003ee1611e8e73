import {
  Controller,
  Get,
  NotFoundException,
  Param,
  Req,
  Res,
  Type,
  UseFilters,
  UseGuards,
} from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { OutboxAdminAuthGuard } from '../outbox-admin-auth.guard';
import { OutboxAdminExceptionFilter } from '../outbox-admin-exception.filter';
import { DASHBOARD_HEADERS, DashboardAssets } from './outbox-admin-ui.assets';

/** The page, at `<path>/ui`; it loads `ui/dashboard.css` and `ui/dashboard.js` relative to itself. */
const PAGE = 'dashboard.html';

/**
 * The dashboard (`register({ ui: true })`): one HTML page and its script and stylesheet, behind
 * the same guards as the API, which the page calls with `fetch` from the browser. It reads
 * nothing from the request but the file name, and changes nothing.
 */
@Controller()
@UseGuards(OutboxAdminAuthGuard)
@UseFilters(OutboxAdminExceptionFilter)
export class OutboxAdminUiController {
  constructor(
    private readonly assets: DashboardAssets,
    private readonly adapterHost: HttpAdapterHost,
  ) {}

  @Get('ui')
  page(@Req() request: unknown, @Res() response: unknown): void {
    const { httpAdapter } = this.adapterHost;
    const url = String(httpAdapter.getRequestUrl(request) ?? '');
    // `ui/` would resolve the page's relative URLs one level too deep; a relative Location
    // keeps working behind a proxy that strips or adds a prefix.
    if (url.split('?')[0].endsWith('/')) {
      httpAdapter.setHeader(response, 'Cache-Control', 'no-store');
      httpAdapter.redirect(response, 308, '../ui');
      return;
    }
    this.send(response, PAGE);
  }

  @Get('ui/:file')
  file(@Param('file') file: string, @Res() response: unknown): void {
    if (file === PAGE) throw new NotFoundException(`No dashboard file ${file}`);
    this.send(response, file);
  }

  private send(response: unknown, name: string): void {
    const asset = this.assets.get(name);
    if (!asset) throw new NotFoundException(`No dashboard file ${name}`);
    const { httpAdapter } = this.adapterHost;
    for (const [header, value] of Object.entries(DASHBOARD_HEADERS)) {
      httpAdapter.setHeader(response, header, value);
    }
    httpAdapter.setHeader(response, 'Content-Type', asset.contentType);
    httpAdapter.reply(response, asset.body, 200);
  }
}

/** The dashboard controller mounted at `path`, one subclass per registration (as the API's). */
export function createOutboxAdminUiController(path: string): Type<OutboxAdminUiController> {
  class MountedOutboxAdminUiController extends OutboxAdminUiController {}
  Controller(path)(MountedOutboxAdminUiController);
  Object.defineProperty(MountedOutboxAdminUiController, 'name', {
    value: 'OutboxAdminUiController',
  });
  return MountedOutboxAdminUiController;
}
