import { kvasirTsupOptions } from '@kvasir/tsup-config';
import { defineConfig } from 'tsup';

export default defineConfig(
  kvasirTsupOptions(
    {
      index: 'src/index.ts',
      connectors: 'src/connectors/index.ts',
      portable: 'src/portable.ts',
      testing: 'src/testing/index.ts',
      conformance: 'src/conformance/index.ts',
    },
    // The conformance suites are vitest tests; vitest is the caller's (an optional peer).
    { external: ['vitest'] },
  ),
);
