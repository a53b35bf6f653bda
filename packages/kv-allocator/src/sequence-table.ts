import { KvAllocatorError } from './errors.js';
import type { SeqId } from './types.js';

/** Freed ids remembered, so that freeing one again is `DOUBLE_FREE` rather than unknown. */
const RECENTLY_FREED_CAPACITY = 4096;

/**
 * The live sequences of a `KvCacheManager` by id, and the ids freed most recently (a bounded
 * set), so that a second `free` of a sequence is told apart from a sequence never seen.
 */
export class SequenceTable<T> {
  readonly #seqs = new Map<SeqId, T>();
  readonly #recentlyFreed = new Set<SeqId>();

  /** Live sequences. */
  get size(): number {
    return this.#seqs.size;
  }

  has(seqId: SeqId): boolean {
    return this.#seqs.has(seqId);
  }

  /** The sequence, or undefined for an id that is not live. */
  find(seqId: SeqId): T | undefined {
    return this.#seqs.get(seqId);
  }

  /**
   * The live sequence.
   * @throws {KvAllocatorError} DOUBLE_FREE for a sequence freed recently; UNKNOWN_SEQUENCE for
   *   one never seen.
   */
  get(seqId: SeqId): T {
    const s = this.#seqs.get(seqId);
    if (s) return s;
    if (this.#recentlyFreed.has(seqId)) {
      throw new KvAllocatorError('DOUBLE_FREE', `sequence ${String(seqId)} was already freed`, {
        details: { seqId },
      });
    }
    throw new KvAllocatorError('UNKNOWN_SEQUENCE', `unknown sequence ${String(seqId)}`, {
      details: { seqId },
    });
  }

  /** Adds a new live sequence (an id freed before may be used again). */
  add(seqId: SeqId, seq: T): void {
    this.#seqs.set(seqId, seq);
    this.#recentlyFreed.delete(seqId);
  }

  /** Removes a freed sequence, remembering its id. */
  remove(seqId: SeqId): void {
    this.#seqs.delete(seqId);
    this.#recentlyFreed.add(seqId);
    const oldest = this.#recentlyFreed.values().next();
    if (this.#recentlyFreed.size > RECENTLY_FREED_CAPACITY && !oldest.done) {
      this.#recentlyFreed.delete(oldest.value);
    }
  }

  /** Ids of the live sequences. */
  keys(): IterableIterator<SeqId> {
    return this.#seqs.keys();
  }

  /** The live sequences. */
  values(): IterableIterator<T> {
    return this.#seqs.values();
  }
}
