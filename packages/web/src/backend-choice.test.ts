import { describe, expect, it } from 'vitest';
import { chooseWebBackend, type PageCapabilities } from './backend-choice.js';

const page = (over: Partial<PageCapabilities> = {}): PageCapabilities => ({
  webgpu: null,
  crossOriginIsolated: true,
  wasmSimd: true,
  wasmSharedMemory: true,
  cores: 8,
  ...over,
});

describe('chooseWebBackend', () => {
  it('auto: a hardware adapter, else wasm threads when isolated, else one thread, saying why', () => {
    const gpu = { isSoftware: false, description: 'nvidia ampere' };
    expect(chooseWebBackend('auto', page({ webgpu: gpu }))).toMatchObject({ backend: 'webgpu' });
    const soft = { isSoftware: true, description: 'google swiftshader' };
    const wasm = chooseWebBackend('auto', page({ webgpu: soft }), 4);
    expect(wasm).toMatchObject({ backend: 'wasm', threads: 4 });
    expect((wasm as { reason: string }).reason).toMatch(/software/);
    const single = chooseWebBackend('auto', page({ crossOriginIsolated: false }));
    expect(single).toMatchObject({ backend: 'cpu', threads: 1 });
    expect((single as { reason: string }).reason).toMatch(
      /no WebGPU adapter; single-threaded because the page is not cross-origin isolated/,
    );
    expect(chooseWebBackend('auto', page({ wasmSimd: false }))).toMatchObject({ backend: 'cpu' });
  });

  it('caps threads at the cores and 16, and refuses a named backend the page lacks', () => {
    expect(chooseWebBackend('wasm', page({ cores: 32 }), 64)).toMatchObject({ threads: 16 });
    expect(chooseWebBackend('wasm', page({ cores: 2 }), 8)).toMatchObject({ threads: 2 });
    expect(chooseWebBackend('webgpu', page())).toMatch(/^webgpu: this page has no WebGPU adapter/);
    expect(chooseWebBackend('wasm', page({ crossOriginIsolated: false }))).toMatch(
      /^wasm: the page is not cross-origin isolated \(serve it with Cross-Origin-Opener-Policy/,
    );
    expect(chooseWebBackend('cpu', page())).toMatchObject({ backend: 'cpu' });
  });
});
