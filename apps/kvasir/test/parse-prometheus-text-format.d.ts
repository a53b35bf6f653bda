// The parser ships no types: what the Model Server Protocol test reads of its output.
declare module 'parse-prometheus-text-format' {
  interface PrometheusMetric {
    readonly value?: string;
    readonly labels?: Record<string, string>;
    readonly buckets?: Record<string, string>;
    readonly count?: string;
    readonly sum?: string;
  }
  interface PrometheusFamily {
    readonly name: string;
    readonly help: string;
    readonly type: 'COUNTER' | 'GAUGE' | 'HISTOGRAM' | 'SUMMARY' | 'UNTYPED';
    readonly metrics: readonly PrometheusMetric[];
  }
  /** Parses a Prometheus text exposition into metric families; throws on malformed input. */
  export default function parsePrometheusTextFormat(text: string): PrometheusFamily[];
}
