import { kvasirTsupConfig } from '@kvasir/tsup-config';

export default kvasirTsupConfig({ index: 'src/index.ts', testing: 'src/testing/index.ts' });
