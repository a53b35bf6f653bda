import { kvasirTsupConfig } from '@kvasir/tsup-config';

export default kvasirTsupConfig(['src/index.ts', 'src/policies.ts']);
