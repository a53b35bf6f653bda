import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';

/** Headers of one hop, never passed on (the router opens its own connections). */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'content-length',
]);

/** `headers` without the hop-by-hop ones: what goes on to the replica or back to the client. */
export function forwardHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(headers)) {
    if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
  }
  return out;
}

/** `max_tokens` (or chat's `max_completion_tokens`) of a body, 16 when absent or malformed. */
export function maxTokensOf(body: unknown): number {
  const b = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const n = b.max_completion_tokens ?? b.max_tokens;
  return typeof n === 'number' && Number.isFinite(n) && n >= 0 ? n : 16;
}

/** An OpenAI-shaped error body. */
export function errorBody(message: string, code: string, type = 'server_error'): string {
  return JSON.stringify({ error: { message, type, param: null, code } });
}

/** The whole body of `req`, or `undefined` when it is over `maxBytes` (read to its end anyway). */
export function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > maxBytes) over = true;
      else chunks.push(c);
    });
    req.on('end', () => resolve(over ? undefined : Buffer.concat(chunks)));
    req.on('error', reject);
  });
}
