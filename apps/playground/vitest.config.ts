import { kvasirVitestConfig } from '@kvasir/vitest-config';

export default kvasirVitestConfig();
