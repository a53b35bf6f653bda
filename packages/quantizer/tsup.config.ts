import { defineConfig } from 'tsup';

export default defineConfig({
  entry: { index: 'src/index.ts', ggml: 'src/ggml/index.ts' },
  format: ['esm', 'cjs'],
  dts: true,
  sourcemap: true,
  clean: true,
  target: 'node20',
  splitting: false,
});
