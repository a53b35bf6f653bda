// What the browser tests share: a worker entry bundled for browsers, a local origin serving it
// cross-origin isolated (shared wasm memory needs it), and Debian's chromium driven headless by
// playwright-core to run the page and return what it reports.
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { build } from 'esbuild';
import { chromium } from 'playwright-core';

const CHROMIUM = '/usr/bin/chromium';
// ARCHITECTURE.md's flags ("Where the system runs").
const CHROMIUM_ARGS = [
  '--headless=new',
  '--no-sandbox',
  '--enable-unsafe-webgpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

// Shared wasm memory (SharedArrayBuffer) exists only in a cross-origin isolated page.
const ISOLATION_HEADERS = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
};

/** `entry` bundled as one ES module for a browser's Web Worker. */
export async function bundleWorker(entry: string): Promise<string> {
  const bundle = await build({
    entryPoints: [entry],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    write: false,
    // The package.json `browser` field disables the Node-only modules (files, worker_threads,
    // the terminal progress bar); esbuild warns that their imports are undefined, which the
    // browser path never calls.
    logLevel: 'error',
  });
  return bundle.outputFiles[0]!.text;
}

/**
 * A page at `/` that starts `/worker.js` as a module worker, posts it `message`, and exposes
 * its first reply as `window.result` (with `pageIsolated`).
 */
export function workerPage(message: unknown): string {
  return `<!doctype html>
<script type="module">
  const worker = new Worker('/worker.js', { type: 'module' });
  window.result = new Promise((resolve) => {
    worker.onmessage = (e) => resolve({ ...e.data, pageIsolated: self.crossOriginIsolated });
    worker.onerror = (e) => resolve({ ok: false, error: 'worker error: ' + e.message });
  });
  worker.postMessage(${JSON.stringify(message)});
</script>`;
}

/** A local HTTP origin serving `routes` (path → content type and body), cross-origin isolated. */
export interface PageServer {
  readonly origin: string;
  close(): Promise<void>;
}

/** Serves `routes` on 127.0.0.1 at a free port. */
export async function servePage(
  routes: Readonly<Record<string, readonly [string, string | Uint8Array]>>,
): Promise<PageServer> {
  const server: Server = createServer((req, res) => {
    const route = routes[req.url ?? ''];
    if (!route) {
      res.writeHead(404, ISOLATION_HEADERS).end();
      return;
    }
    res.writeHead(200, { ...ISOLATION_HEADERS, 'Content-Type': route[0] }).end(route[1]);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no server address');
  return {
    origin: `http://127.0.0.1:${address.port}`,
    close: () =>
      server.listening
        ? new Promise<void>((resolve) => server.close(() => resolve()))
        : Promise.resolve(),
  };
}

/**
 * Opens `url` in headless chromium and returns the page's `window.result`; a result with
 * `ok: false` throws with the page's console.
 */
export async function runInChromium<T extends { ok: boolean; error?: string }>(
  url: string,
): Promise<T> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `${CHROMIUM} is missing: run tooling/scripts/setup.sh as root (it installs Debian's chromium), or apt-get install -y chromium`,
    );
  }
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  try {
    const page = await browser.newPage();
    const console: string[] = [];
    page.on('console', (m) => console.push(m.text()));
    page.on('pageerror', (e) => console.push(e.message));
    await page.goto(url);
    const result = (await page.evaluate('window.result')) as T;
    if (!result.ok) throw new Error(`in chromium: ${result.error}\n${console.join('\n')}`);
    return result;
  } finally {
    await browser.close();
  }
}
