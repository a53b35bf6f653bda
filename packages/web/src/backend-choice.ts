/** A backend the page may ask for. */
export type WebBackendChoice = 'auto' | 'webgpu' | 'wasm' | 'cpu';

/** What the worker found about the page it runs in. */
export interface PageCapabilities {
  /** A WebGPU adapter, or null without one (no `navigator.gpu`, or no adapter). */
  readonly webgpu: { readonly isSoftware: boolean; readonly description: string } | null;
  /** `crossOriginIsolated`: shared memory between workers (wasm threads). */
  readonly crossOriginIsolated: boolean;
  /** WebAssembly SIMD128 (the wasm kernels), and shared memory (their threads). */
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
 * `auto`: WebGPU on a hardware adapter; else the wasm kernels, with threads when the page is
 * cross-origin isolated (threads share one memory, which only an isolated page can hand to its
 * workers), on one thread otherwise (the same kernels over an unshared memory); else, without
 * WebAssembly SIMD128, the TypeScript `cpu` backend. A software WebGPU adapter (SwiftShader) is
 * slower than wasm, so `auto` passes it by. A named backend is itself, or an error saying what
 * the page lacks; `wasm` without isolation runs one thread and says why.
 * @returns the report, or a string saying why the named backend cannot run.
 */
export function chooseWebBackend(
  choice: WebBackendChoice,
  page: PageCapabilities,
  threads?: number,
): BackendReport | string {
  const wanted = Math.max(1, Math.min(threads ?? page.cores, page.cores, 16));
  const threaded = page.wasmSharedMemory && page.crossOriginIsolated;
  const noThreads = !page.crossOriginIsolated
    ? 'the page is not cross-origin isolated (serve it with Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp for threads), so WebAssembly memory cannot be shared with workers'
    : 'WebAssembly shared memory is not available';
  const wasm = (why: string): BackendReport =>
    threaded || wanted === 1
      ? {
          backend: 'wasm',
          threads: wanted,
          reason: `${why}WebAssembly SIMD128 with ${wanted} thread${wanted === 1 ? '' : 's'}${threaded ? ' (cross-origin isolated)' : ''}`,
        }
      : {
          backend: 'wasm',
          threads: 1,
          reason: `${why}WebAssembly SIMD128 with 1 thread: ${noThreads}`,
        };
  switch (choice) {
    case 'webgpu':
      return page.webgpu
        ? { backend: 'webgpu', threads: 1, reason: `asked for: ${page.webgpu.description}` }
        : 'webgpu: this page has no WebGPU adapter (navigator.gpu missing or requestAdapter() gave none)';
    case 'wasm':
      return page.wasmSimd
        ? wasm('asked for: ')
        : 'wasm: WebAssembly SIMD128 is not available in this browser';
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
      if (page.wasmSimd) return wasm(`${noGpu}; `);
      return {
        backend: 'cpu',
        threads: 1,
        reason: `${noGpu}; WebAssembly SIMD128 is not available, so the TypeScript backend runs`,
      };
    }
  }
}
