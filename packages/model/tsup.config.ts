import { defineConfig } from 'tsup';

export default defineConfig({
  entry: {
    index: 'src/index.ts',
    formats: 'src/formats/index.ts',
    kernels: 'src/kernels/index.ts',
  },
  format: ['esm', 'cjs'],
  dts: true,
  sourcemap: true,
  clean: true,
  target: 'node20',
  // Shared chunks, so the three entries share one ModelError class (instanceof holds across them).
  splitting: true,
});
