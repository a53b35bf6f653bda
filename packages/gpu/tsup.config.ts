import { defineConfig } from 'tsup';

export default defineConfig({
  entry: ['src/index.ts'],
  format: ['esm', 'cjs'],
  // The public types mention GPUDevice & co.; consumers get them through this reference.
  dts: { banner: '/// <reference types="@webgpu/types" />' },
  sourcemap: true,
  clean: true,
  target: 'node20',
  splitting: false,
});
