import { randomBytes } from 'node:crypto';
import { Controller, Get, Post, Req, Res } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { AdminGuard, sameSecret } from './admin.guard';
import { AdminSessions, readCookie } from './admin-sessions';

/** What the routes read from a request (Express and Fastify both have these). */
interface SignInRequest {
  protocol: string;
  headers: Record<string, string | string[] | undefined>;
  body?: Record<string, unknown>;
}

const CSRF_COOKIE = 'outbox_signin';

/** A `Set-Cookie` value the browser keeps off cross-site requests and away from scripts. */
function cookie(
  request: SignInRequest,
  name: string,
  value: string,
  path: string,
  maxAgeS?: number,
) {
  return [
    `${name}=${encodeURIComponent(value)}`,
    `Path=${path}`,
    'HttpOnly',
    'SameSite=Strict',
    // Secure only over HTTPS: a browser drops a Secure cookie set over plain http://127.0.0.1.
    // Behind a TLS-terminating proxy, let the app trust it (Express: app.set('trust proxy', 1)).
    ...(request.protocol === 'https' ? ['Secure'] : []),
    ...(maxAgeS === undefined ? [] : [`Max-Age=${maxAgeS}`]),
  ].join('; ');
}

/** A POST from this app's own page: the browser sends `Origin` on every cross-site POST. */
function sameOrigin(request: SignInRequest): boolean {
  const origin = request.headers.origin;
  return origin === undefined || origin === `${request.protocol}://${request.headers.host}`;
}

/**
 * A sign-in form for the dashboard: GET shows it, POST checks the admin key and opens a session
 * whose id goes into an HttpOnly, SameSite=Strict cookie, which the admin guard accepts. The form
 * carries a one-off token that must equal its cookie (double submit) and a POST from another
 * origin is refused, so no other site can sign a browser in or out.
 */
@Controller('admin')
export class SignInController {
  constructor(
    private readonly sessions: AdminSessions,
    private readonly adapterHost: HttpAdapterHost,
  ) {}

  @Get('sign-in')
  form(@Req() request: SignInRequest, @Res() response: unknown): void {
    this.sendForm(request, response, 200, '');
  }

  @Post('sign-in')
  signIn(@Req() request: SignInRequest, @Res() response: unknown): void {
    const body = request.body ?? {};
    const token = readCookie(request.headers.cookie, CSRF_COOKIE);
    if (!sameOrigin(request) || !token || !sameSecret(String(body.csrf ?? ''), token)) {
      this.sendForm(
        request,
        response,
        403,
        'The form expired or came from another site: sign in again.',
      );
      return;
    }
    if (!sameSecret(String(body.key ?? ''), AdminGuard.key)) {
      this.sendForm(request, response, 401, 'That key is not the admin key.');
      return;
    }
    const { httpAdapter } = this.adapterHost;
    const session = this.sessions.open();
    const maxAgeS = AdminSessions.ttlMs / 1000;
    httpAdapter.setHeader(
      response,
      'Set-Cookie',
      cookie(request, AdminSessions.cookie, session, '/', maxAgeS),
    );
    httpAdapter.setHeader(response, 'Cache-Control', 'no-store');
    httpAdapter.redirect(response, 303, '/outbox/ui');
  }

  @Post('sign-out')
  signOut(@Req() request: SignInRequest, @Res() response: unknown): void {
    const { httpAdapter } = this.adapterHost;
    if (sameOrigin(request)) {
      this.sessions.close(readCookie(request.headers.cookie, AdminSessions.cookie));
      httpAdapter.setHeader(
        response,
        'Set-Cookie',
        cookie(request, AdminSessions.cookie, '', '/', 0),
      );
    }
    httpAdapter.redirect(response, 303, '/admin/sign-in');
  }

  private sendForm(
    request: SignInRequest,
    response: unknown,
    status: number,
    problem: string,
  ): void {
    const { httpAdapter } = this.adapterHost;
    const token = randomBytes(32).toString('base64url');
    httpAdapter.setHeader(
      response,
      'Set-Cookie',
      cookie(request, CSRF_COOKIE, token, '/admin/sign-in'),
    );
    // No script, no style, no frame; the form posts only to this app.
    httpAdapter.setHeader(
      response,
      'Content-Security-Policy',
      "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    );
    httpAdapter.setHeader(response, 'Cache-Control', 'no-store');
    httpAdapter.setHeader(response, 'Content-Type', 'text/html; charset=utf-8');
    httpAdapter.reply(
      response,
      [
        '<!doctype html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<title>Sign in: outbox dashboard</title></head><body>',
        '<h1>Outbox dashboard</h1>',
        problem ? `<p role="alert">${problem}</p>` : '',
        '<form method="post" action="/admin/sign-in">',
        `<input type="hidden" name="csrf" value="${token}">`,
        '<label>Admin key <input type="password" name="key" autocomplete="current-password" required autofocus></label> ',
        '<button type="submit">Sign in</button>',
        '</form></body></html>',
      ].join('\n'),
      status,
    );
  }
}
