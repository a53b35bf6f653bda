import { kvasirTsupOptions } from '@kvasir/tsup-config';
import { defineConfig } from 'tsup';

export default defineConfig(kvasirTsupOptions({ index: 'src/index.ts' }));
