import { kvasirTsupConfig } from '@kvasir/tsup-config';

export default kvasirTsupConfig(['src/index.ts'], {
  // The public types mention GPUDevice & co.; consumers get them through this reference.
  dts: { banner: '/// <reference types="@webgpu/types" />' },
});
