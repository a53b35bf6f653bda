import { kvasirTsupOptions } from '@kvasir/tsup-config';
import { defineConfig } from 'tsup';

// Browser code, ESM only: the page's entry and the worker's (which a bundler starts with
// `new Worker(new URL('@kvasir/web/worker', import.meta.url), { type: 'module' })`).
export default defineConfig(
  kvasirTsupOptions(['src/index.ts', 'src/ai-sdk.ts', 'src/worker.ts'], {
    format: ['esm'],
    target: 'es2022',
    platform: 'browser',
  }),
);
