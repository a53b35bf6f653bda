import { copyFileSync, mkdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ggufPath } from '@kvasir/mini-model';
import { defineConfig, type Plugin } from 'vite';

const here = dirname(fileURLToPath(import.meta.url));

// Cross-origin isolation lets the engine run wasm with threads (SharedArrayBuffer).
const ISOLATION = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
};

/** kvasir-mini's GGUF (from @kvasir/mini-model) beside the page, as `models/kvasir-mini.gguf`. */
function miniModel(): Plugin {
  return {
    name: 'kvasir-mini-model',
    configureServer(server) {
      server.middlewares.use('/models/kvasir-mini.gguf', (_req, res) => {
        res.setHeader('Content-Type', 'application/octet-stream');
        res.end(readFileSync(ggufPath));
      });
    },
    writeBundle(options) {
      const out = options.dir ?? join(here, 'dist');
      mkdirSync(join(out, 'models'), { recursive: true });
      copyFileSync(ggufPath, join(out, 'models', 'kvasir-mini.gguf'));
    },
  };
}

export default defineConfig({
  base: './',
  plugins: [miniModel()],
  worker: { format: 'es' },
  build: { target: 'es2022', outDir: 'dist', emptyOutDir: true },
  server: { headers: ISOLATION },
  preview: { headers: ISOLATION },
});
