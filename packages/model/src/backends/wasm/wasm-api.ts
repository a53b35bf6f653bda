// The few WebAssembly and Web Worker names this backend uses: the package compiles without
// the DOM library, and @types/node declares only part of the WebAssembly namespace.

export interface WasmMemory {
  readonly buffer: ArrayBuffer | SharedArrayBuffer;
  grow(pages: number): number;
}

export interface WasmGlobal {
  value: number;
}

/** A compiled module (opaque; structured-cloneable to workers). */
export type WasmModule = object;

export interface WasmInstance {
  readonly exports: Record<string, unknown>;
}

interface WasmApi {
  Memory: new (d: { initial: number; maximum: number; shared: boolean }) => WasmMemory;
  Instance: new (m: WasmModule, imports: object) => WasmInstance;
  Module: new (bytes: Uint8Array) => WasmModule;
  compile(bytes: Uint8Array): Promise<WasmModule>;
  instantiate(m: WasmModule, imports: object): Promise<WasmInstance>;
  validate(bytes: Uint8Array): boolean;
}

/** The runtime's `WebAssembly`, or undefined where there is none. */
export function wasmApi(): WasmApi | undefined {
  return (globalThis as unknown as { WebAssembly?: WasmApi }).WebAssembly;
}

/** A browser's `Worker`, reduced to what the thread pool uses. */
export interface BrowserWorker {
  onmessage: ((e: { data: { ready?: boolean; error?: string } }) => void) | null;
  onerror: ((e: { message: string }) => void) | null;
  postMessage(data: unknown): void;
  terminate(): void;
}

export function browserWorker(url: string): BrowserWorker {
  const W = (globalThis as unknown as { Worker: new (url: string) => BrowserWorker }).Worker;
  return new W(url);
}

export function blobUrl(source: string): string {
  const g = globalThis as unknown as {
    Blob: new (parts: string[], o: { type: string }) => unknown;
    URL: { createObjectURL(b: unknown): string };
  };
  return g.URL.createObjectURL(new g.Blob([source], { type: 'text/javascript' }));
}
