/** Options of `kvasir simulate`. */
export interface SimulateOptions {
  readonly hardware: string;
  readonly modelProfile: string;
  readonly workload: string;
  readonly rate?: number;
  readonly requests: number;
  readonly seed: number;
  readonly json: boolean;
}

/** `kvasir simulate`: the scheduler's serving simulator (capacity planning). */
export async function simulateCommand(_options: SimulateOptions): Promise<void> {
  throw new Error('simulate: @kvasir/scheduler/sim is not available yet');
}
