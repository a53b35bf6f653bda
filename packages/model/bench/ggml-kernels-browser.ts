// The GGML matmul kernel bench (ggml-kernels-core.ts) in headless Chromium, whose relaxed SIMD
// runs the kernels' relaxed build (Node 20 cannot: its relaxed int8 dot is a draft), against the
// plain build in the same page, alternating relaxed / plain for `rounds` rounds. Needs Debian's
// chromium (tooling/scripts/setup.sh).
//   tsx bench/ggml-kernels-browser.ts [threads] [reps] [rounds]
// Prints one JSON object: per case, each build's fastest run over all rounds and the ratio.
import { createServer } from 'node:http';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { chromium } from 'playwright-core';
import type { KernelTiming } from './ggml-kernels-core.js';

const [threadsArg = '1', repsArg = '7', roundsArg = '3'] = process.argv.slice(2);
const here = dirname(fileURLToPath(import.meta.url));

const WORKER = `
import { createWasmRuntime } from '../src/backends/wasm/wasm-runtime.js';
import { benchGgmlKernels } from './ggml-kernels-core.js';
self.onmessage = async (e) => {
  try {
    const { threads, reps, rounds } = e.data;
    const runs = [];
    for (let r = 0; r < rounds; r++) {
      for (const build of r % 2 ? ['plain', 'relaxed'] : ['relaxed', 'plain']) {
        const rt = await createWasmRuntime({ threads, reserveBytes: 96 << 20, build });
        runs.push({ build, results: benchGgmlKernels(rt, reps, () => performance.now()) });
        await rt.close();
      }
    }
    self.postMessage({ ok: true, runs });
  } catch (err) {
    self.postMessage({ ok: false, error: String(err && err.stack || err) });
  }
};`;

const bundle = await build({
  stdin: { contents: WORKER, resolveDir: here, sourcefile: 'worker.ts', loader: 'ts' },
  bundle: true,
  format: 'esm',
  platform: 'browser',
  write: false,
  logLevel: 'error',
});
const workerJs = bundle.outputFiles[0]?.text ?? '';
const PAGE = `<!doctype html><script type="module">
  const worker = new Worker('/worker.js', { type: 'module' });
  window.result = new Promise((resolve) => {
    worker.onmessage = (e) => resolve(e.data);
    worker.onerror = (e) => resolve({ ok: false, error: 'worker error: ' + e.message });
  });
  worker.postMessage({ threads: ${Number(threadsArg)}, reps: ${Number(repsArg)}, rounds: ${Number(roundsArg)} });
</script>`;
const headers = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
};
const server = createServer((req, res) => {
  if (req.url === '/') res.writeHead(200, { ...headers, 'Content-Type': 'text/html' }).end(PAGE);
  else if (req.url === '/worker.js')
    res.writeHead(200, { ...headers, 'Content-Type': 'text/javascript' }).end(workerJs);
  else res.writeHead(404, headers).end();
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const address = server.address();
if (address === null || typeof address === 'string') throw new Error('no server address');
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless=new', '--no-sandbox', '--disable-background-networking', '--no-first-run'],
});
try {
  const page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${address.port}/`);
  const result = (await page.evaluate('window.result')) as {
    ok: boolean;
    error?: string;
    runs: { build: string; results: KernelTiming[] }[];
  };
  if (!result.ok) throw new Error(result.error);
  const best = new Map<string, { relaxed: number; plain: number }>();
  for (const run of result.runs) {
    for (const t of run.results) {
      const key = `${t.format} ${t.shape} m=${t.m}`;
      const b = best.get(key) ?? {
        relaxed: Number.POSITIVE_INFINITY,
        plain: Number.POSITIVE_INFINITY,
      };
      b[run.build as 'relaxed' | 'plain'] = Math.min(b[run.build as 'relaxed' | 'plain'], t.us);
      best.set(key, b);
    }
  }
  console.log(
    JSON.stringify({
      runtime: `chromium ${browser.version()}`,
      threads: Number(threadsArg),
      reps: Number(repsArg),
      rounds: Number(roundsArg),
      us: Object.fromEntries(
        [...best].map(([k, v]) => [
          k,
          {
            relaxed: v.relaxed,
            plain: v.plain,
            plain_over_relaxed: Number((v.plain / v.relaxed).toFixed(3)),
          },
        ]),
      ),
    }),
  );
} finally {
  await browser.close();
  server.close();
}
