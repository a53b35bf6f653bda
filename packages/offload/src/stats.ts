import type { OffloadStats } from './types.js';

/** Mutable counters behind `stats()`. */
export class Counters {
  hits = 0;
  misses = 0;
  puts = 0;
  deletes = 0;
  evictions = 0;
  corrupt = 0;
  foreign = 0;
  errors = 0;
  bytesRead = 0;
  bytesWritten = 0;

  snapshot(
    tier: string,
    entries: number | undefined,
    bytes: number | undefined,
    capacityBytes: number,
  ): OffloadStats {
    return {
      tier,
      entries,
      bytes,
      capacityBytes,
      hits: this.hits,
      misses: this.misses,
      puts: this.puts,
      deletes: this.deletes,
      evictions: this.evictions,
      corrupt: this.corrupt,
      foreign: this.foreign,
      errors: this.errors,
      bytesRead: this.bytesRead,
      bytesWritten: this.bytesWritten,
    };
  }
}
