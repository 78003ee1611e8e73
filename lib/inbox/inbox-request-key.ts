import type { ExecutionContext } from '@nestjs/common';
import { createHash } from 'node:crypto';
import { InboxOptions } from './inbox-options.interface';

/** What the inbox records for one HTTP request: the scoped key and the request's fingerprint. */
export interface InboxRequestKey {
  /** The record's `message_id`: the key itself, or a hash of (scope, key) when scoped. */
  recordId: string;
  /** Hash of the request, stored with the record; undefined when fingerprinting is off. */
  fingerprint?: string;
}

/**
 * Scopes an HTTP idempotency key and fingerprints its request (docs/guarantees.md, Guarantees 16, IETF
 * idempotency-key draft). Other contexts keep their message id as it is: their ids come from a
 * producer, not from a client that may reuse them.
 */
export async function httpRequestKey(
  context: ExecutionContext,
  options: InboxOptions,
  key: string,
): Promise<InboxRequestKey> {
  if (context.getType<string>() !== 'http') return { recordId: key };
  const request = context.switchToHttp().getRequest();
  let recordId = key;
  if (options.scope) {
    const scope = await options.scope(request, context);
    if (
      scope !== undefined &&
      scope !== null &&
      typeof scope !== 'string' &&
      typeof scope !== 'number'
    ) {
      throw new TypeError(
        `@Inbox({ scope }) must return a string or a number (or nothing), got ${typeof scope}`,
      );
    }
    // A fixed-length hash keeps the record id within 255 characters whatever the scope and key,
    // and two scopes can never produce one id. No scope (anonymous) is its own scope.
    recordId = `scoped:${hash(JSON.stringify([scope === undefined || scope === null ? null : String(scope), key]))}`;
  }
  if (options.fingerprint === false) return { recordId };
  const subject =
    typeof options.fingerprint === 'function'
      ? await options.fingerprint(request, context)
      : [request?.method, request?.originalUrl ?? request?.url, request?.body];
  return { recordId, fingerprint: hash(canonicalJson(subject)) };
}

function hash(text: string): string {
  return createHash('sha256').update(text).digest('base64url');
}

/** JSON with object keys sorted, so a re-serialized body of the same request hashes the same. */
function canonicalJson(value: unknown): string {
  return (
    JSON.stringify(value, (_key, v: unknown) => {
      if (v === undefined) return null;
      if (typeof v === 'object' && v !== null && !Array.isArray(v)) {
        if (Buffer.isBuffer(v)) return v.toString('base64');
        return Object.fromEntries(
          Object.keys(v as object)
            .sort()
            .map((k) => [k, (v as Record<string, unknown>)[k]]),
        );
      }
      return v;
    }) ?? 'null'
  );
}
