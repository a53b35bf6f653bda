import { kvasirVitestConfig } from '@kvasir/vitest-config';

export default kvasirVitestConfig({
  test: {
    // End-to-end tests start real server processes from the built CLI: build it once first.
    globalSetup: ['./test/global-setup.ts'],
    // Server processes are CPU heavy on two cores; one test file at a time.
    fileParallelism: false,
  },
});
