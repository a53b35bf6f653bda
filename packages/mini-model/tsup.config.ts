import { kvasirTsupOptions } from '@kvasir/tsup-config';
import { defineConfig } from 'tsup';

export default defineConfig(
  kvasirTsupOptions(['src/index.ts'], {
    // The entry locates the weights beside itself: `import.meta.url` in ESM, `__filename` in CJS.
    shims: true,
  }),
);
