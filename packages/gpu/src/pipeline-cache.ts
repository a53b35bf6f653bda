import { GpuError } from './errors.js';
import { formatCompileMessages } from './gpu-helpers.js';
import type { PipelineDescriptor } from './gpu-types.js';

/**
 * Compute pipelines and shader modules of one device, each compiled once: a module per WGSL
 * source, a pipeline per entry point, constants and source. A failed compile is not kept.
 */
export class PipelineCache {
  readonly #device: GPUDevice;
  readonly #withErrorScope: <T>(fn: () => T | Promise<T>) => Promise<T>;
  readonly #pipelines = new Map<string, Promise<GPUComputePipeline>>();
  readonly #modules = new Map<string, Promise<GPUShaderModule>>();
  #hits = 0;
  #misses = 0;

  /** `withErrorScope` turns the device's validation errors into a `GpuError` (see `Gpu`). */
  constructor(device: GPUDevice, withErrorScope: <T>(fn: () => T | Promise<T>) => Promise<T>) {
    this.#device = device;
    this.#withErrorScope = withErrorScope;
  }

  /** Hits (a pipeline compiled earlier), misses, and pipelines held. */
  get stats(): { hits: number; misses: number; size: number } {
    return { hits: this.#hits, misses: this.#misses, size: this.#pipelines.size };
  }

  /** The pipeline for `desc`, compiled once per entry point, constants and code. */
  get(desc: PipelineDescriptor): Promise<GPUComputePipeline> {
    const entryPoint = desc.entryPoint ?? 'main';
    const constants = desc.constants ?? {};
    const constantKey = Object.keys(constants)
      .sort()
      .map((k) => `${k}=${constants[k]}`)
      .join(',');
    const key = `${entryPoint}\u0000${constantKey}\u0000${desc.code}`;
    const cached = this.#pipelines.get(key);
    if (cached !== undefined) {
      this.#hits++;
      return cached;
    }
    this.#misses++;
    const created = this.#createPipeline(desc, entryPoint, constants);
    this.#pipelines.set(key, created);
    // A failed compile is not cached: the caller may fix its environment and retry.
    created.catch(() => this.#pipelines.delete(key));
    return created;
  }

  #module(code: string, label: string): Promise<GPUShaderModule> {
    let m = this.#modules.get(code);
    if (m === undefined) {
      m = (async () => {
        this.#device.pushErrorScope('validation');
        const module = this.#device.createShaderModule({ code, label });
        const info = await module.getCompilationInfo();
        const scopeError = await this.#device.popErrorScope();
        const errors = info.messages.filter((msg) => msg.type === 'error');
        if (errors.length > 0 || scopeError !== null) {
          const text =
            errors.length > 0 ? formatCompileMessages(code, errors) : `  ${scopeError?.message}`;
          throw new GpuError(
            'SHADER_COMPILE',
            `WGSL shader '${label}' failed to compile:\n${text}`,
            {
              details: {
                messages: errors.map((e) => ({
                  line: e.lineNum,
                  column: e.linePos,
                  message: e.message,
                })),
              },
            },
          );
        }
        return module;
      })();
      this.#modules.set(code, m);
      m.catch(() => this.#modules.delete(code));
    }
    return m;
  }

  async #createPipeline(
    desc: PipelineDescriptor,
    entryPoint: string,
    constants: Readonly<Record<string, number>>,
  ): Promise<GPUComputePipeline> {
    const label = desc.label ?? entryPoint;
    const module = await this.#module(desc.code, label);
    try {
      return await this.#withErrorScope(() =>
        this.#device.createComputePipelineAsync({
          label,
          layout: 'auto',
          compute: { module, entryPoint, constants: { ...constants } },
        }),
      );
    } catch (cause) {
      if (GpuError.isInstance(cause) && cause.code !== 'VALIDATION') throw cause;
      throw new GpuError(
        'PIPELINE',
        `Compute pipeline '${label}' (entry point '${entryPoint}') could not be created: ${cause instanceof Error ? cause.message : String(cause)}`,
        { cause },
      );
    }
  }

  /** Drops every pipeline and module (the device is going away). */
  clear(): void {
    this.#pipelines.clear();
    this.#modules.clear();
  }
}
