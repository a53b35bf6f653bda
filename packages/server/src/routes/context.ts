import type { InFlightRequests } from '../in-flight.js';
import type { InferenceEngine } from '../inference-engine.js';
import type { ServerMetrics } from '../metrics.js';

/** What the routes share: the engine, the metrics and the generations in flight. */
export interface RouteContext {
  readonly engine: InferenceEngine;
  readonly metrics: ServerMetrics;
  readonly inflight: InFlightRequests;
  /** Largest `n` accepted. */
  readonly maxN: number;
  /** Largest non-streamed answer, in bytes (estimated before generating). */
  readonly maxResponseBytes?: number;
}
