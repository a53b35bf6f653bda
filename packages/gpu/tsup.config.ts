import { kvasirTsupOptions } from '@kvasir/tsup-config';
import { defineConfig } from 'tsup';

export default defineConfig(
  kvasirTsupOptions(['src/index.ts'], {
    // The public types mention GPUDevice & co.; consumers get them through this reference.
    dts: { banner: '/// <reference types="@webgpu/types" />' },
  }),
);
