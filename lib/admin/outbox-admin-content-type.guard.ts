import {
  CanActivate,
  ExecutionContext,
  Injectable,
  UnsupportedMediaTypeException,
} from '@nestjs/common';

interface RequestLike {
  method?: string;
  headers: Record<string, string | string[] | undefined>;
}

/** Methods that change nothing; every other admin route replays or purges. */
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * A state-changing admin request (POST, DELETE, and any other method but GET/HEAD/OPTIONS) must
 * say `Content-Type: application/json`, with or without a body. An HTML form on another site can
 * POST `application/x-www-form-urlencoded`, `multipart/form-data` or `text/plain` without a CORS
 * preflight, and the browser adds the admin cookie if the app's guard accepts one; it cannot send
 * `application/json`. DELETE is covered too, so a method-override middleware cannot turn such a
 * form into one. `+json` types (`application/json-patch+json`, ...) are refused: the routes take
 * plain JSON, which is all the app's JSON parser reads by default.
 */
@Injectable()
export class OutboxAdminContentTypeGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<RequestLike>();
    if (SAFE_METHODS.has(String(request.method).toUpperCase())) return true;
    if (!isJson(request.headers['content-type'])) {
      throw new UnsupportedMediaTypeException(
        'send Content-Type: application/json on every POST and DELETE of the admin API, ' +
          'with or without a body',
      );
    }
    // A compressed body is inflated by the parser after its Content-Length was checked against
    // `maxBodyBytes`: the limit would count the compressed bytes. The dashboard never compresses.
    const encoding = request.headers['content-encoding'];
    if (encoding !== undefined && String(encoding).trim().toLowerCase() !== 'identity') {
      throw new UnsupportedMediaTypeException(
        `the admin API takes uncompressed bodies: send no Content-Encoding (got "${String(encoding)}")`,
      );
    }
    return true;
  }
}

/** `application/json`, in any letter case, with or without parameters (`; charset=utf-8`). */
function isJson(header: string | string[] | undefined): boolean {
  if (typeof header !== 'string') return false;
  const semicolon = header.indexOf(';');
  const mediaType = semicolon === -1 ? header : header.slice(0, semicolon);
  return mediaType.trim().toLowerCase() === 'application/json';
}
