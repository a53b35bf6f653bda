// Which build of the kernels runs where. The relaxed build needs relaxed SIMD whose int8 dot
// follows the final specification; Node 20 has relaxed SIMD only behind
// --experimental-wasm-relaxed-simd, as a draft whose dot doubles the products and drops the
// accumulator, so there the backend must keep the plain build (a child process runs under the
// flag). The relaxed build itself is tested against the plain one in Chromium
// (wasm-browser.test.ts).
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { ModelError } from '../../errors.js';
import { wasmFeatures } from './wasm-module.js';
import { createWasmRuntime } from './wasm-runtime.js';

const nodeMajor = Number(process.versions.node.split('.')[0]);
const moduleTs = fileURLToPath(new URL('./wasm-module.ts', import.meta.url));
const generatedTs = fileURLToPath(new URL('./kernels-wasm.generated.ts', import.meta.url));

// What a process with relaxed SIMD on sees: whether the relaxed build validates, what the
// probe's dot gives (f(-3, 7, 1000): 1000 + 4 · (-3 · 7) = 916 by the specification), the
// features and the build the backend picks.
const CHILD = `
import { KERNELS_RELAXED_WASM_BASE64 } from ${JSON.stringify(generatedTs)};
import { kernelsModule, wasmFeatures } from ${JSON.stringify(moduleTs)};
const hex = '0061736d0100000001080160037f7f7f017f03020100070501016600000a160114002000fd0f2001fd0f2002fd11fd9302fd1b000b';
const bytes = Uint8Array.from(hex.match(/../g), (h) => parseInt(h, 16));
const probe = new WebAssembly.Instance(new WebAssembly.Module(bytes), {}).exports.f(-3, 7, 1000);
const validates = WebAssembly.validate(Buffer.from(KERNELS_RELAXED_WASM_BASE64, 'base64'));
const { build } = await kernelsModule();
console.log(JSON.stringify({ validates, probe, features: wasmFeatures(), build }));
`;

describe('wasm kernels builds', () => {
  it('keeps the plain build where the relaxed int8 dot is a draft (Node 20 under its flag), takes the relaxed one where it is the final one', async () => {
    const flags = nodeMajor < 22 ? ['--experimental-wasm-relaxed-simd'] : [];
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [...flags, '--import', 'tsx', '--input-type=module', '-e', CHILD],
      { cwd: fileURLToPath(new URL('../../..', import.meta.url)) },
    );
    const seen = JSON.parse(stdout.trim().split('\n').at(-1) as string);
    expect(seen.validates).toBe(true);
    if (nodeMajor < 22) {
      // The draft: twice the products, no accumulator.
      expect(seen.probe).toBe(2 * 4 * (-3 * 7));
      expect(seen.features.relaxedSimd).toBe(false);
      expect(seen.build).toBe('plain');
    } else {
      expect(seen.probe).toBe(916);
      expect(seen.features.relaxedSimd).toBe(true);
      expect(seen.build).toBe('relaxed');
    }
  }, 60_000);

  it('refuses the relaxed build with a typed error where the runtime lacks it', async () => {
    if (wasmFeatures().relaxedSimd) {
      const rt = await createWasmRuntime({ threads: 1, reserveBytes: 1 << 20, build: 'relaxed' });
      expect(rt.build).toBe('relaxed');
      await rt.close();
      return;
    }
    const err = await createWasmRuntime({
      threads: 1,
      reserveBytes: 1 << 20,
      build: 'relaxed',
    }).catch((e: unknown) => e);
    expect(ModelError.isInstance(err) && err.code).toBe('BACKEND');
    expect(String((err as Error).message)).toContain('relaxed SIMD');
  });
});
