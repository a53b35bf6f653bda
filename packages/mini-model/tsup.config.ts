import { kvasirTsupConfig } from '@kvasir/tsup-config';

export default kvasirTsupConfig(['src/index.ts'], {
  // The entry locates the weights beside itself: `import.meta.url` in ESM, `__filename` in CJS.
  shims: true,
});
