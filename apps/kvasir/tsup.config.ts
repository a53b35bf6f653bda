import { kvasirTsupOptions } from '@kvasir/tsup-config';
import { defineConfig } from 'tsup';

// The app ships ESM only: its library entry with declarations, and the CLI as an executable.
export default defineConfig([
  kvasirTsupOptions(['src/index.ts'], { format: ['esm'] }),
  kvasirTsupOptions(['src/cli.ts'], {
    format: ['esm'],
    dts: false,
    clean: false,
    banner: { js: '#!/usr/bin/env node' },
  }),
]);
