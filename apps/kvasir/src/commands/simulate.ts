import {
  findMaxRate,
  HARDWARE,
  type HardwareName,
  MODELS,
  type ModelName,
  type SimulationResult,
  type SystemKind,
  simulate,
} from '@kvasir/scheduler/sim';
import { KvasirAppError } from '../errors.js';

/** Options of `kvasir simulate`. */
export interface SimulateOptions {
  readonly hardware: string;
  readonly modelProfile: string;
  readonly workload: string;
  /** Simulate this rate; search the highest sustainable rate when absent. */
  readonly rate?: number;
  readonly requests: number;
  readonly seed: number;
  /** Mean normalized latency bound (s/token) for the rate search. */
  readonly latencyBound: number;
  readonly json: boolean;
  /** Progress on stderr: one line per simulated rate (rewritten in place on a terminal). */
  readonly progress?: boolean;
}

/** Progress lines on stderr; on a terminal one line, rewritten. */
function progressWriter(enabled: boolean): { line(text: string): void; end(): void } {
  const tty = process.stderr.isTTY === true;
  let shown = false;
  return {
    line(text) {
      if (!enabled) return;
      if (tty) process.stderr.write(`\r\x1b[2K[kvasir] ${text}`);
      else process.stderr.write(`[kvasir] ${text}\n`);
      shown = true;
    },
    end() {
      if (enabled && tty && shown) process.stderr.write('\r\x1b[2K');
    },
  };
}

const SYSTEMS: readonly SystemKind[] = ['kvasir', 'orca', 'static'];

/**
 * `kvasir simulate`: answers "how many requests per second does this model on this GPU sustain
 * at this latency?" with the scheduler's deterministic roofline simulator, comparing Kvasir
 * (paged + continuous batching + prefix caching) with Orca-like and static batching.
 * @throws KvasirAppError `INVALID_CONFIG` for an unknown profile or workload.
 */
export async function simulateCommand(options: SimulateOptions): Promise<void> {
  if (!(options.hardware in HARDWARE)) {
    throw new KvasirAppError(
      'INVALID_CONFIG',
      `unknown hardware profile ${options.hardware} (known: ${Object.keys(HARDWARE).join(', ')})`,
    );
  }
  if (!(options.modelProfile in MODELS)) {
    throw new KvasirAppError(
      'INVALID_CONFIG',
      `unknown model profile ${options.modelProfile} (known: ${Object.keys(MODELS).join(', ')})`,
    );
  }
  if (!['sharegpt', 'alpaca', 'shared-prefix'].includes(options.workload)) {
    throw new KvasirAppError(
      'INVALID_CONFIG',
      `unknown workload ${options.workload} (known: sharegpt, alpaca, shared-prefix)`,
    );
  }
  const hardware = options.hardware as HardwareName;
  const model = options.modelProfile as ModelName;
  const kind = options.workload as 'sharegpt' | 'alpaca' | 'shared-prefix';
  const workload = { kind, numRequests: options.requests, seed: options.seed };
  const rows: Record<string, unknown>[] = [];
  const progress = progressWriter(options.progress ?? true);
  for (const system of SYSTEMS) {
    if (options.rate !== undefined) {
      progress.line(`${system}: simulating ${options.requests} requests at ${options.rate} req/s`);
      const r: SimulationResult = simulate({
        model,
        hardware,
        system,
        workload: { ...workload, rate: options.rate },
      });
      rows.push({ rate: options.rate, ...r });
    } else {
      let probes = 0;
      const r = findMaxRate({
        model,
        hardware,
        system,
        workload,
        latencyBound: options.latencyBound,
        onProbe: (p) => {
          probes++;
          progress.line(
            `${system}: rate ${p.rate.toFixed(2)} req/s → ${p.meanNormalizedLatencyS.toFixed(3)} s/token (${p.underBound ? 'under' : 'over'} the bound; probe ${probes})`,
          );
        },
      });
      rows.push({
        system,
        max_rate: r.maxRate,
        limited_by: r.limitedBy,
        ...(r.atMaxRate
          ? {
              mean_normalized_latency_s: r.atMaxRate.meanNormalizedLatencyS,
              output_tokens_per_s: r.atMaxRate.outputTokensPerS,
              mean_batch_size: r.atMaxRate.meanBatchSize,
              kv_tokens: r.atMaxRate.kvTokens,
            }
          : {}),
      });
    }
  }
  progress.end();
  const result = {
    hardware,
    model,
    workload: kind,
    requests: options.requests,
    ...(options.rate === undefined ? { latency_bound_s_per_token: options.latencyBound } : {}),
    systems: rows,
  };
  if (options.json) {
    process.stdout.write(`${JSON.stringify(result)}\n`);
    return;
  }
  const lines = [`${model} on ${hardware}, ${kind} workload (${options.requests} requests)`];
  for (const row of rows) {
    if (options.rate === undefined) {
      const name = String(row.system).padEnd(7);
      const rate = Number(row.max_rate).toFixed(2);
      if (row.limited_by === 'max-rate') {
        lines.push(
          `  ${name} max rate ≥ ${rate} req/s: the search's upper bound, not a result (${options.requests} requests stay under ${options.latencyBound} s/token at any rate; simulate more --requests)`,
        );
      } else if (row.limited_by === 'min-rate') {
        lines.push(
          `  ${name} no rate meets ${options.latencyBound} s/token, not even the search's lowest (raise --latency-bound)`,
        );
      } else {
        lines.push(`  ${name} max rate ${rate} req/s under ${options.latencyBound} s/token`);
      }
    } else {
      const r = row as unknown as SimulationResult;
      lines.push(
        `  ${r.system.padEnd(7)} ${r.outputTokensPerS.toFixed(0)} tok/s, normalized latency ${r.meanNormalizedLatencyS.toFixed(3)} s/token, TTFT p99 ${r.p99TtftS.toFixed(2)} s, batch ${r.meanBatchSize.toFixed(1)}`,
      );
    }
  }
  process.stdout.write(`${lines.join('\n')}\n`);
}
