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
  it('auto: a hardware adapter, else wasm threads when isolated, else one wasm thread, saying why', () => {
    const gpu = { isSoftware: false, description: 'nvidia ampere' };
    expect(chooseWebBackend('auto', page({ webgpu: gpu }))).toMatchObject({ backend: 'webgpu' });
    const soft = { isSoftware: true, description: 'google swiftshader' };
    const wasm = chooseWebBackend('auto', page({ webgpu: soft }), 4);
    expect(wasm).toMatchObject({ backend: 'wasm', threads: 4 });
    expect((wasm as { reason: string }).reason).toMatch(/software/);
    expect((wasm as { reason: string }).reason).toMatch(/4 threads \(cross-origin isolated\)/);
    const single = chooseWebBackend('auto', page({ crossOriginIsolated: false }));
    expect(single).toMatchObject({ backend: 'wasm', threads: 1 });
    expect((single as { reason: string }).reason).toMatch(
      /^no WebGPU adapter; WebAssembly SIMD128 with 1 thread: the page is not cross-origin isolated \(serve it with Cross-Origin-Opener-Policy/,
    );
    // Isolated but without shared memory (a browser that has none): one thread, saying so.
    expect(
      chooseWebBackend('auto', page({ wasmSharedMemory: false }), 4) as { reason: string },
    ).toMatchObject({ backend: 'wasm', threads: 1, reason: /shared memory is not available/ });
    // Asked for one thread, one thread runs and nothing is missing.
    const one = chooseWebBackend('auto', page({ crossOriginIsolated: false }), 1);
    expect(one).toMatchObject({ backend: 'wasm', threads: 1 });
    expect((one as { reason: string }).reason).not.toMatch(/isolated/);
    const cpu = chooseWebBackend('auto', page({ wasmSimd: false, crossOriginIsolated: false }));
    expect(cpu).toMatchObject({ backend: 'cpu', threads: 1 });
    expect((cpu as { reason: string }).reason).toMatch(/SIMD128 is not available/);
  });

  it('caps threads at the cores and 16, and refuses a named backend the page lacks', () => {
    expect(chooseWebBackend('wasm', page({ cores: 32 }), 64)).toMatchObject({ threads: 16 });
    expect(chooseWebBackend('wasm', page({ cores: 2 }), 8)).toMatchObject({ threads: 2 });
    expect(chooseWebBackend('webgpu', page())).toMatch(/^webgpu: this page has no WebGPU adapter/);
    expect(chooseWebBackend('wasm', page({ crossOriginIsolated: false }), 4)).toMatchObject({
      backend: 'wasm',
      threads: 1,
      reason:
        /^asked for: WebAssembly SIMD128 with 1 thread: the page is not cross-origin isolated/,
    });
    expect(chooseWebBackend('wasm', page({ wasmSimd: false }))).toMatch(
      /^wasm: WebAssembly SIMD128 is not available/,
    );
    expect(chooseWebBackend('cpu', page())).toMatchObject({ backend: 'cpu' });
  });
});
