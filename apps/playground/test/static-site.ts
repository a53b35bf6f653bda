// The built playground served from loopback, cross-origin isolated as a deployment should be
// (COOP/COEP: the engine gets wasm threads).
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { extname, join, normalize } from 'node:path';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript',
  '.css': 'text/css',
  '.wasm': 'application/wasm',
  '.gguf': 'application/octet-stream',
};

export interface StaticSite {
  readonly origin: string;
  close(): Promise<void>;
}

/** Serves `root` on 127.0.0.1 (a random port); `/` is `index.html`. */
export async function serveStatic(root: string): Promise<StaticSite> {
  const server = createServer(async (req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname));
    const file = join(root, path === '/' ? 'index.html' : path);
    const headers = {
      'Cross-Origin-Opener-Policy': 'same-origin',
      'Cross-Origin-Embedder-Policy': 'require-corp',
    };
    if (!file.startsWith(root) || !existsSync(file)) {
      res.writeHead(404, headers).end();
      return;
    }
    const body = await readFile(file);
    res
      .writeHead(200, {
        ...headers,
        'Content-Type': TYPES[extname(file)] ?? 'application/octet-stream',
        'Content-Length': String(body.byteLength),
      })
      .end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no server address');
  return {
    origin: `http://127.0.0.1:${address.port}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
