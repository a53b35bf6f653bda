/** A backend the page may ask for. */
export type WebBackendChoice = 'auto' | 'webgpu' | 'wasm' | 'cpu';

/** What the worker found about the page it runs in. */
export interface PageCapabilities {
  /** A WebGPU adapter, or null without one (no `navigator.gpu`, or no adapter). */
  readonly webgpu: { readonly isSoftware: boolean; readonly description: string } | null;
  /** `crossOriginIsolated`: shared memory between workers (wasm threads). */
  readonly crossOriginIsolated: boolean;
  /** WebAssembly SIMD128 and shared memory, as @kvasir/model's wasm backend needs them. */
  readonly wasmSimd: boolean;
  readonly wasmSharedMemory: boolean;
  /** `navigator.hardwareConcurrency`. */
  readonly cores: number;
}

/** The backend the engine runs on, and why, in words a developer can act on. */
export interface BackendReport {
  readonly backend: 'webgpu' | 'wasm' | 'cpu';
  /** Threads of the wasm backend (1 elsewhere). */
  readonly threads: number;
  readonly reason: string;
}

/**
 * `auto`: WebGPU on a hardware adapter; else the wasm kernels with threads when the page is
 * cross-origin isolated; else one thread: the TypeScript `cpu` backend, because the wasm kernels
 * need shared memory, which a page gets only when cross-origin isolated. A software WebGPU
 * adapter (SwiftShader) is slower than wasm, so `auto` passes it by. A named backend is itself,
 * or an error saying what the page lacks.
 * @returns the report, or a string saying why the named backend cannot run.
 */
export function chooseWebBackend(
  choice: WebBackendChoice,
  page: PageCapabilities,
  threads?: number,
): BackendReport | string {
  const wasmThreads = Math.max(1, Math.min(threads ?? page.cores, page.cores, 16));
  const wasmRuns = page.wasmSimd && page.wasmSharedMemory && page.crossOriginIsolated;
  const noWasm = !page.crossOriginIsolated
    ? 'the page is not cross-origin isolated (serve it with Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp), so WebAssembly has no shared memory'
    : !page.wasmSimd
      ? 'WebAssembly SIMD128 is not available'
      : 'WebAssembly shared memory is not available';
  switch (choice) {
    case 'webgpu':
      return page.webgpu
        ? { backend: 'webgpu', threads: 1, reason: `asked for: ${page.webgpu.description}` }
        : 'webgpu: this page has no WebGPU adapter (navigator.gpu missing or requestAdapter() gave none)';
    case 'wasm':
      return wasmRuns
        ? { backend: 'wasm', threads: wasmThreads, reason: `asked for: ${wasmThreads} threads` }
        : `wasm: ${noWasm}`;
    case 'cpu':
      return { backend: 'cpu', threads: 1, reason: 'asked for' };
    case 'auto': {
      if (page.webgpu && !page.webgpu.isSoftware) {
        return {
          backend: 'webgpu',
          threads: 1,
          reason: `hardware WebGPU adapter: ${page.webgpu.description}`,
        };
      }
      const noGpu = page.webgpu
        ? `the WebGPU adapter is software (${page.webgpu.description}), slower than WebAssembly`
        : 'no WebGPU adapter';
      if (wasmRuns) {
        return {
          backend: 'wasm',
          threads: wasmThreads,
          reason: `${noGpu}; cross-origin isolated: WebAssembly SIMD128 with ${wasmThreads} threads`,
        };
      }
      return { backend: 'cpu', threads: 1, reason: `${noGpu}; single-threaded because ${noWasm}` };
    }
  }
}
