import { kvasirTsupOptions } from '@kvasir/tsup-config';
import { defineConfig } from 'tsup';

export default defineConfig(
  kvasirTsupOptions(
    { index: 'src/index.ts', formats: 'src/formats.ts', kernels: 'src/kernels.ts' },
    // Shared chunks, so the three entries share one ModelError class (instanceof holds across them).
    // Shims: the XGrammar loader resolves the package from `import.meta.url` (`__filename` in CJS).
    { splitting: true, shims: true },
  ),
);
