import { ArgumentMetadata, BadRequestException, Injectable, ValidationPipe } from '@nestjs/common';
import type { ValidationError } from 'class-validator';
import { IS_NOT_NULL } from './dto/admin-field.decorators';

/**
 * Keys refused wherever they appear: those Nest's ValidationPipe would silently delete (prototype
 * pollution), and every name on `Object.prototype` (`toString`, `hasOwnProperty`, …), which
 * class-validator's whitelist looks up in a plain object and so lets through as "known".
 */
function isForbiddenKey(key: string): boolean {
  return key === 'prototype' || key in Object.prototype;
}

// Deepest nesting a request may have; the deepest valid body is { filter: { type: "…" } }.
const MAX_DEPTH = 8;

// A lone surrogate: a high one not followed by a low one, or a low one not preceded by a high one.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Why `text` cannot reach a store, if it cannot: PostgreSQL refuses a NUL in text (an error, so a
 * 500), and the SQL stores and Redis turn a lone surrogate into U+FFFD (or merge it), so a filter
 * would select other dead letters than the one it names.
 */
function unstorable(text: string): string | undefined {
  if (text.includes('\u0000')) return 'must not contain a NUL character (\\u0000)';
  if (LONE_SURROGATE.test(text)) {
    return 'must not contain a lone UTF-16 surrogate (\\uD800-\\uDFFF without its pair)';
  }
  return undefined;
}

function checkText(text: string, path: string): void {
  const problem = unstorable(text);
  if (problem) throw new BadRequestException([`${path} ${problem}`]);
}

/**
 * The admin routes' own validation, independent of any global pipe: unknown fields, `null` fields
 * and prototype keys are 400s naming the field, and a `null` field is reported once ("must not be
 * null") rather than with every constraint it also fails.
 */
@Injectable()
export class OutboxAdminValidationPipe extends ValidationPipe {
  constructor() {
    super({
      whitelist: true,
      forbidNonWhitelisted: true,
      forbidUnknownValues: true,
      transform: true,
      validationError: { target: false, value: false },
    });
  }

  /** Path parameters are strings and skip `stripProtoKeys`, so their text is checked here. */
  override transform(value: unknown, metadata: ArgumentMetadata): Promise<unknown> {
    if (typeof value === 'string') checkText(value, metadata.data ?? metadata.type);
    return super.transform(value, metadata);
  }

  /**
   * Replaces Nest's silent delete: prototype keys are refused like any unknown field, and so is a
   * NUL or a lone surrogate in any key or string (query or body), naming its path. The walk is
   * bounded in depth: no admin body nests more than three levels, and recursing into a deeply
   * nested array (tens of thousands of levels fit in 64 KiB) would overflow the stack, a 500.
   */
  protected override stripProtoKeys(value: unknown): void {
    const pending: Array<{ value: unknown; path: string; depth: number }> = [
      { value, path: '', depth: 0 },
    ];
    for (let next = pending.pop(); next; next = pending.pop()) {
      if (typeof next.value === 'string') checkText(next.value, next.path);
      if (next.value === null || typeof next.value !== 'object') continue;
      if (next.depth >= MAX_DEPTH) {
        throw new BadRequestException([
          `${next.path} is nested more than ${MAX_DEPTH} levels deep`,
        ]);
      }
      const isArray = Array.isArray(next.value);
      for (const [key, child] of Object.entries(next.value)) {
        const path = isArray ? `${next.path}[${key}]` : next.path ? `${next.path}.${key}` : key;
        if (isForbiddenKey(key)) {
          throw new BadRequestException([`property ${path} should not exist`]);
        }
        checkText(key, `property name in ${next.path || 'the request'}`);
        pending.push({ value: child, path, depth: next.depth + 1 });
      }
    }
  }

  protected override flattenValidationErrors(errors: ValidationError[]): string[] {
    return [...new Set(super.flattenValidationErrors(errors.map(onlyNullMessage)))];
  }
}

function onlyNullMessage(error: ValidationError): ValidationError {
  const nullMessage = error.constraints?.[IS_NOT_NULL];
  return {
    ...error,
    constraints: nullMessage ? { [IS_NOT_NULL]: nullMessage } : error.constraints,
    children: error.children?.map(onlyNullMessage),
  };
}
