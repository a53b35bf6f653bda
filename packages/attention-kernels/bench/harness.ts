// Shared pieces of the attention-kernels benchmark: the context every section gets, and timing.
import type { Gpu } from '@kvasir/gpu';

/** What each benchmark section receives. */
export interface BenchContext {
  readonly gpu: Gpu;
  /** Smaller shapes (`--quick`), for a smoke run. */
  readonly quick: boolean;
  /** The adapter's streaming-read bandwidth measured earlier in this run (GB/s), the ceiling. */
  streamReadGbps: number;
  /**
   * Measures the ceiling again (GB/s, the best pattern, one short sample), so that a section can
   * pair each of its timings with a ceiling taken just before it: on a shared machine the
   * ceiling drifts by tens of percent within a run.
   */
  measureStream: () => Promise<number>;
  /** Human-readable progress (silent with --json). */
  log(message: string): void;
}

/** A section adds its figures (flat keys, numbers or strings) to the run's one JSON object. */
export type BenchSection = (
  ctx: BenchContext,
) => Promise<Record<string, number | string | boolean>>;

/**
 * Median GPU time in ms of the work `encode` records, after `warmup` untimed runs. Each timed
 * sample records the work `repeat` times in one submission, so wall-clock timing (when the
 * adapter has no timestamps) amortizes submission overhead; the result is per repetition.
 */
export async function medianMs(
  gpu: Gpu,
  encode: (encoder: GPUCommandEncoder) => void,
  options: { samples?: number; warmup?: number; repeat?: number } = {},
): Promise<{ ms: number; source: 'timestamp' | 'wall-clock' }> {
  const samples = options.samples ?? 5;
  const repeat = options.repeat ?? 1;
  for (let i = 0; i < (options.warmup ?? 1); i++) await gpu.run(encode);
  const times: number[] = [];
  let source: 'timestamp' | 'wall-clock' = 'wall-clock';
  for (let i = 0; i < samples; i++) {
    const t = await gpu.time((encoder) => {
      for (let r = 0; r < repeat; r++) encode(encoder);
    });
    times.push(t.ms / repeat);
    source = t.source;
    // Per-dispatch uniforms were consumed by the submission above.
    gpu.uniforms.reset();
  }
  times.sort((a, b) => a - b);
  return { ms: times[Math.floor(times.length / 2)]!, source };
}
