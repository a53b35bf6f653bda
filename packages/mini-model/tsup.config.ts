import { defineConfig } from 'tsup';

export default defineConfig({
  entry: ['src/index.ts'],
  format: ['esm', 'cjs'],
  dts: true,
  sourcemap: true,
  clean: true,
  target: 'node20',
  splitting: false,
  // The entry locates the weights beside itself: `import.meta.url` in ESM, `__filename` in CJS.
  shims: true,
});
