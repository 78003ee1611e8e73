import { randomBytes } from 'node:crypto';
import { Injectable } from '@nestjs/common';

/** One value of a `Cookie` request header, without a cookie-parser dependency. */
export function readCookie(header: unknown, name: string): string | undefined {
  if (typeof header !== 'string') return undefined;
  for (const part of header.split(';')) {
    const [key, ...rest] = part.trim().split('=');
    if (key !== name) continue;
    try {
      return decodeURIComponent(rest.join('='));
    } catch {
      return undefined; // malformed percent-encoding: no usable cookie, so 403 rather than 500
    }
  }
  return undefined;
}

/**
 * Sign-in sessions of the sample, in memory: a random id per sign-in, valid for `ttlMs`. A real app
 * keeps them where its other sessions live (a table, Redis) and ties them to a user.
 */
@Injectable()
export class AdminSessions {
  static readonly cookie = 'outbox_session';
  static readonly ttlMs = 8 * 60 * 60 * 1000;
  private readonly expiries = new Map<string, number>();

  open(): string {
    const id = randomBytes(32).toString('base64url');
    this.expiries.set(id, Date.now() + AdminSessions.ttlMs);
    return id;
  }

  isOpen(id: string | undefined): boolean {
    if (!id) return false;
    const expiry = this.expiries.get(id);
    if (expiry === undefined) return false;
    if (expiry > Date.now()) return true;
    this.expiries.delete(id);
    return false;
  }

  close(id: string | undefined): void {
    if (id) this.expiries.delete(id);
  }
}
