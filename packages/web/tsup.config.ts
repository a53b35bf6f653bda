import { kvasirTsupOptions } from '@kvasir/tsup-config';
import { defineConfig } from 'tsup';
import { xgrammarBundle } from './build/xgrammar-bundle.js';

// Browser code, ESM only: the page's entry and the worker's (which a bundler starts with
// `new Worker(new URL('@kvasir/web/worker', import.meta.url), { type: 'module' })`).
// Split: XGrammar's bundle (1.1 MB of text) is its own chunk, which the worker imports only for
// the first request with structured output.
export default defineConfig(
  kvasirTsupOptions(['src/index.ts', 'src/ai-sdk.ts', 'src/worker.ts'], {
    format: ['esm'],
    target: 'es2022',
    platform: 'browser',
    splitting: true,
    esbuildPlugins: [xgrammarBundle()],
  }),
);
