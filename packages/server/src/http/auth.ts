import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { EngineError } from '../errors.js';

/** The only routes served without the API key; every other route, unknown ones too, needs it. */
const PUBLIC_ROUTES: ReadonlySet<string> = new Set(['/health', '/metrics']);

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

/**
 * An `onRequest` hook requiring `Authorization: Bearer <apiKey>` on every route but `/health`
 * and `/metrics`; the key is compared in constant time (as digests of equal length).
 * Decided on the route that will run (the router's decoded, matched path), never on the raw
 * URL: `/%761/models` and absolute-form targets reach the same routes as `/v1/models`.
 */
export function bearerAuth(apiKey: string): (request: FastifyRequest) => Promise<void> {
  const keyDigest = digest(apiKey);
  return async (request) => {
    const route = request.routeOptions.url;
    if (route !== undefined && PUBLIC_ROUTES.has(route)) return;
    const header = request.headers.authorization;
    const token = typeof header === 'string' && header.startsWith('Bearer ') ? header.slice(7) : '';
    if (!timingSafeEqual(digest(token), keyDigest)) {
      throw new EngineError('UNAUTHORIZED', 'missing or invalid API key (Authorization: Bearer)');
    }
  };
}
