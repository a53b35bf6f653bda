import {
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http';
import type { Replica } from './replica.js';
import { errorBody, forwardHeaders } from './router-http.js';

/** Answers a replica may give that another replica could do better with (full queue, draining). */
const RETRY_STATUSES = new Set([429, 502, 503]);

/** What one attempt on one replica came to. */
export type Attempt =
  | { readonly kind: 'done' }
  /** Nothing reached the client: another replica may take the request. */
  | {
      readonly kind: 'retry';
      readonly status?: number;
      readonly headers?: IncomingHttpHeaders;
      readonly body?: Buffer;
      readonly reason: string;
    };

/** One request passed to one replica. */
export interface AttemptOptions {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly body: Buffer;
  readonly replica: Replica;
  /** `x-kvasir-route` for the response, when routes are explained. */
  readonly explain?: string;
  /** The response's first body byte came: the replica has prefilled the prompt. */
  readonly onStarted: () => void;
  /** The replica broke the response after its first byte. */
  readonly onBroken: () => void;
  readonly log: (line: string) => void;
}

/**
 * Sends the request to the replica and streams its answer back unchanged. Upstream headers are
 * held until the first body byte, so until then the request can still move: a refused or reset
 * connection, or a 429/502/503, resolves `retry` with nothing sent to the client. After it, a
 * broken stream ends with an OpenAI error event (or a reset, for JSON) and resolves `done`.
 */
export function forwardToReplica(o: AttemptOptions): Promise<Attempt> {
  const { req, res, body, replica, explain } = o;
  return new Promise<Attempt>((resolve) => {
    let settled = false;
    const settle = (a: Attempt) => {
      if (settled) return;
      settled = true;
      resolve(a);
    };
    const headers = forwardHeaders(req.headers);
    headers['content-length'] = String(body.length);
    const upstream = httpRequest(`${replica.url}${req.url ?? '/'}`, {
      method: req.method,
      headers,
      agent: replica.agent,
    });
    // The client left: stop the replica's work too (it aborts on disconnect).
    const onClientClose = () => {
      if (!res.writableFinished) upstream.destroy();
    };
    res.on('close', onClientClose);
    let started = false;
    let failed = false;
    let contentType = '';
    const fail = (error: Error) => {
      if (failed || settled) return;
      failed = true;
      res.off('close', onClientClose);
      if (!started) {
        replica.failures++;
        // Nothing listens there: out at once. A reset connection is retried elsewhere, but
        // the replica stays in (a keep-alive race or one failed request is not a dead one;
        // its health check decides).
        const refused = (error as NodeJS.ErrnoException).code === 'ECONNREFUSED';
        if (refused) replica.down = true;
        if (refused && replica.healthy && !res.destroyed) {
          replica.healthy = false;
          o.log(
            `replica ${replica.url} refused a connection; not routing to it until its health check passes`,
          );
        }
        settle({ kind: 'retry', reason: `${replica.url}: ${error.message}` });
        return;
      }
      o.onBroken();
      breakStream(res, replica, contentType, error.message);
      settle({ kind: 'done' });
    };
    upstream.on('error', fail);
    upstream.on('response', (up) => {
      const status = up.statusCode ?? 502;
      if (RETRY_STATUSES.has(status)) {
        const chunks: Buffer[] = [];
        up.on('data', (c: Buffer) => chunks.push(c));
        up.on('end', () => {
          res.off('close', onClientClose);
          settle({
            kind: 'retry',
            status,
            headers: up.headers,
            body: Buffer.concat(chunks),
            reason: `${replica.url} answered ${status}`,
          });
        });
        return;
      }
      const start = () => {
        if (started) return;
        started = true;
        o.onStarted();
        contentType = String(up.headers['content-type'] ?? '');
        res.writeHead(status, {
          ...forwardHeaders(up.headers),
          'x-kvasir-replica': replica.url,
          ...(explain === undefined ? {} : { 'x-kvasir-route': explain }),
        });
        res.flushHeaders();
      };
      up.on('data', (chunk: Buffer) => {
        start();
        if (!res.write(chunk)) {
          up.pause();
          res.once('drain', () => up.resume());
        }
      });
      up.on('end', () => {
        if (!up.complete) {
          fail(new Error('the replica closed the response'));
          return;
        }
        res.off('close', onClientClose);
        start();
        res.end();
        settle({ kind: 'done' });
      });
      up.on('aborted', () => fail(new Error('the replica closed the response')));
      up.on('error', fail);
    });
    upstream.end(body);
  });
}

/** Ends a response the replica broke after its first byte: an SSE error event, else a reset. */
function breakStream(
  res: ServerResponse,
  replica: Replica,
  contentType: string,
  reason: string,
): void {
  replica.failures++;
  if (res.destroyed || res.writableEnded) return;
  if (contentType.startsWith('text/event-stream')) {
    const message = `replica ${replica.url} failed during the stream (${reason})`;
    res.end(`data: ${errorBody(message, 'replica_failed')}\n\ndata: [DONE]\n\n`);
  } else {
    // A JSON body cut in the middle cannot be completed honestly.
    res.destroy();
  }
}
