import { kvasirVitestConfig } from '@kvasir/vitest-config';

export default kvasirVitestConfig({
  test: {
    // Each browser test file starts chromium and a wasm model: one at a time on two cores.
    fileParallelism: false,
  },
});
