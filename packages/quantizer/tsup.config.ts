import { kvasirTsupConfig } from '@kvasir/tsup-config';

export default kvasirTsupConfig({ index: 'src/index.ts', ggml: 'src/ggml/index.ts' });
