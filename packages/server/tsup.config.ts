import { kvasirTsupOptions } from '@kvasir/tsup-config';
import { defineConfig } from 'tsup';

export default defineConfig(kvasirTsupOptions(['src/index.ts', 'src/spec.ts', 'src/tools.ts']));
