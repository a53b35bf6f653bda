/// <reference types="@webgpu/types" />
import { addWgsl, biasAddWgsl, ELEMENTWISE_WORKGROUP, swigluWgsl } from './elementwise.wgsl.js';
import { embeddingWgsl } from './embedding.wgsl.js';
import {
  gemvRows,
  gemvWgsl,
  type MatmulShaderOptions,
  TILE,
  tiledMatmulWgsl,
} from './matmul.wgsl.js';
import type { MatmulEpilogue } from './reference.js';
import { headRmsNormWgsl, rmsNormWgsl } from './rms-norm.wgsl.js';
import type { StoredFormat } from './weight-format.js';

/** A packed weight resident on the GPU (see {@link PackedWeight} and {@link GgmlWeight}). */
export interface GpuWeight {
  readonly format: StoredFormat;
  readonly rows: number;
  readonly cols: number;
  readonly groupSize: number;
  readonly data: GPUBuffer;
  readonly scales: GPUBuffer | undefined;
}

/**
 * One kernel launch whose buffers are bound once and whose size is chosen per step:
 * `encode(pass, m)` picks the variant for `m` rows, reusing its bind group.
 */
export interface DenseOp {
  encode(pass: GPUComputePassEncoder, m: number): void;
}

/** Rows up to which the decode matrix-vector kernel is used instead of the tiled one. */
export const GEMV_MAX_ROWS = 8;

/** Largest workgroup count per dimension (WebGPU's guaranteed minimum limit). */
const MAX_DIM = 65535;

/** An op of one workgroup per row; nothing is recorded for zero rows. */
function perRowOp(p: GPUComputePipeline, g: GPUBindGroup): DenseOp {
  return {
    encode(pass, m) {
      if (m === 0) return;
      pass.setPipeline(p);
      pass.setBindGroup(0, g);
      pass.dispatchWorkgroups(m);
    },
  };
}

/**
 * Compiled pipelines per device, shared by every `DenseKernels` on it: models loaded one after
 * another on one device (the app's, a test file's) compile each kernel once. A software adapter
 * spends seconds on each first dispatch.
 */
const pipelinesByDevice = new WeakMap<GPUDevice, Map<string, GPUComputePipeline>>();

/**
 * Builds and caches the dense-kernel pipelines of one device and prepares their launches.
 * Nothing here submits: every op encodes into the caller's compute pass, so a whole forward
 * step is one submission.
 */
export class DenseKernels {
  readonly #device: GPUDevice;
  readonly #pipelines: Map<string, GPUComputePipeline>;

  constructor(device: GPUDevice) {
    this.#device = device;
    let cache = pipelinesByDevice.get(device);
    if (cache === undefined) {
      cache = new Map();
      pipelinesByDevice.set(device, cache);
    }
    this.#pipelines = cache;
  }

  /** Pipeline for a WGSL module (cached by source text). */
  pipeline(code: string): GPUComputePipeline {
    let p = this.#pipelines.get(code);
    if (!p) {
      const module = this.#device.createShaderModule({ code });
      p = this.#device.createComputePipeline({
        layout: 'auto',
        compute: { module, entryPoint: 'main' },
      });
      this.#pipelines.set(code, p);
    }
    return p;
  }

  #bind(p: GPUComputePipeline, entries: Array<[number, GPUBuffer | undefined]>): GPUBindGroup {
    return this.#device.createBindGroup({
      layout: p.getBindGroupLayout(0),
      entries: entries
        .filter((e): e is [number, GPUBuffer] => e[1] !== undefined)
        .map(([binding, buffer]) => ({ binding, resource: { buffer } })),
    });
  }

  /**
   * `y = x · Wᵀ` (+ bias) with an epilogue, for `m` rows given at encode time; `params` is a
   * uniform buffer whose first u32 holds the same `m` when the step runs.
   */
  matmul(args: {
    x: GPUBuffer;
    w: GpuWeight;
    y: GPUBuffer;
    params: GPUBuffer;
    bias?: GPUBuffer | undefined;
    epilogue?: MatmulEpilogue;
  }): DenseOp {
    const { w } = args;
    const o: MatmulShaderOptions = {
      format: w.format,
      n: w.rows,
      k: w.cols,
      groupSize: w.groupSize,
      epilogue: args.epilogue ?? 'store',
      bias: args.bias !== undefined,
    };
    const entries: Array<[number, GPUBuffer | undefined]> = [
      [0, args.x],
      [1, w.data],
      [2, args.y],
      [3, args.params],
      [4, w.scales],
      [5, args.bias],
    ];
    const variants = new Map<number, { p: GPUComputePipeline; g: GPUBindGroup }>();
    const variant = (mTile: number) => {
      let v = variants.get(mTile);
      if (!v) {
        const p = this.pipeline(mTile === 0 ? tiledMatmulWgsl(o) : gemvWgsl(o, mTile));
        v = { p, g: this.#bind(p, entries) };
        variants.set(mTile, v);
      }
      return v;
    };
    return {
      encode(pass, m) {
        if (m === 0) return;
        const mTile = m === 1 ? 1 : m <= 4 ? 4 : m <= GEMV_MAX_ROWS ? 8 : 0;
        const v = variant(mTile);
        pass.setPipeline(v.p);
        pass.setBindGroup(0, v.g);
        if (mTile === 0) pass.dispatchWorkgroups(Math.ceil(o.n / TILE), Math.ceil(m / TILE));
        else pass.dispatchWorkgroups(Math.ceil(o.n / gemvRows(mTile)), Math.ceil(m / mTile));
      },
    };
  }

  /** RMSNorm of `m` rows (optionally gathered through `rowIndex`). */
  rmsNorm(args: {
    x: GPUBuffer;
    weight: GPUBuffer;
    y: GPUBuffer;
    h: number;
    eps: number;
    rowIndex?: GPUBuffer | undefined;
    /** Add the result into `y` instead of storing it. */
    add?: boolean;
  }): DenseOp {
    const p = this.pipeline(
      rmsNormWgsl(args.h, args.eps, args.rowIndex !== undefined, args.add ?? false),
    );
    const g = this.#bind(p, [
      [0, args.x],
      [1, args.weight],
      [2, args.y],
      [4, args.rowIndex],
    ]);
    return perRowOp(p, g);
  }

  /**
   * RMSNorm of each of the `heads` rows of `d` values of `m` tokens, in place (Qwen3's per-head
   * Q/K norm): `encode(pass, m)` normalizes `m · heads` rows.
   */
  headRmsNorm(args: {
    x: GPUBuffer;
    weight: GPUBuffer;
    d: number;
    heads: number;
    eps: number;
  }): DenseOp {
    const p = this.pipeline(headRmsNormWgsl(args.d, args.heads, args.eps));
    const g = this.#bind(p, [
      [0, args.x],
      [1, args.weight],
    ]);
    return {
      encode(pass, m) {
        if (m === 0) return;
        pass.setPipeline(p);
        pass.setBindGroup(0, g);
        pass.dispatchWorkgroups(m, args.heads);
      },
    };
  }

  /** Embedding gather of `m` token ids (i32) from a packed table. */
  embedding(args: { ids: GPUBuffer; table: GpuWeight; y: GPUBuffer; scale?: number }): DenseOp {
    const t = args.table;
    const p = this.pipeline(embeddingWgsl(t.format, t.cols, t.groupSize, args.scale));
    const g = this.#bind(p, [
      [0, args.ids],
      [1, t.data],
      [2, args.y],
      [4, t.scales],
    ]);
    return perRowOp(p, g);
  }

  /**
   * Element-wise ops over `count` elements (`params` = {count, width} as two u32):
   * `swiglu` (out = silu(a)·b), `add` (out += a), `biasAdd` (out[i] += a[i % width]).
   * `encode(pass, count)` takes the element count.
   */
  elementwise(
    kind: 'swiglu' | 'add' | 'biasAdd',
    args: { a: GPUBuffer; b?: GPUBuffer; out: GPUBuffer; params: GPUBuffer },
  ): DenseOp {
    const code = kind === 'swiglu' ? swigluWgsl() : kind === 'add' ? addWgsl() : biasAddWgsl();
    const p = this.pipeline(code);
    const g = this.#bind(p, [
      [0, args.a],
      [1, kind === 'swiglu' ? args.b : undefined],
      [2, args.out],
      [3, args.params],
    ]);
    return {
      encode(pass, count) {
        if (count === 0) return;
        const groups = Math.ceil(count / ELEMENTWISE_WORKGROUP);
        pass.setPipeline(p);
        pass.setBindGroup(0, g);
        if (groups <= MAX_DIM) pass.dispatchWorkgroups(groups);
        else pass.dispatchWorkgroups(MAX_DIM, Math.ceil(groups / MAX_DIM));
      },
    };
  }
}
