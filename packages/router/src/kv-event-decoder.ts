import { unpack } from 'msgpackr';
import { RouterError } from './errors.js';

/**
 * A block hash as the index keys it: 16-byte (any length) `bytes` hashes as lowercase hex, which
 * for Kvasir replicas is exactly `@kvasir/kv-allocator`'s `BlockHash`; integer hashes (some vLLM
 * configurations) as `#` and the decimal digits.
 */
export type HashKey = string;

/** The tier a block lives in, as events name it (`GPU`, `CPU`, `DISK`, `REDIS`, ...). */
export type Medium = string;

/** `medium` of an event that names none: vLLM's engine pool. */
export const DEFAULT_MEDIUM: Medium = 'GPU';

/** One KV event, decoded from either of vLLM's encodings. */
export type KvEvent =
  | {
      readonly type: 'BlockStored';
      readonly blockHashes: readonly HashKey[];
      readonly parentBlockHash: HashKey | null;
      readonly tokenIds: readonly number[];
      readonly blockSize: number | undefined;
      readonly medium: Medium;
    }
  | {
      readonly type: 'BlockRemoved';
      readonly blockHashes: readonly HashKey[];
      readonly medium: Medium;
    }
  | { readonly type: 'AllBlocksCleared' };

/** One event batch: `[ts, events, data_parallel_rank]`. */
export interface KvEventBatch {
  readonly ts: number;
  readonly events: readonly KvEvent[];
  readonly dataParallelRank: number | null;
}

const HEX: string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

function invalid(message: string): RouterError {
  return new RouterError('INVALID_EVENT', message);
}

/** The index key of a wire hash (`bytes` or integer). */
export function hashKey(value: unknown): HashKey {
  if (value instanceof Uint8Array) {
    let s = '';
    for (let i = 0; i < value.length; i++) s += HEX[value[i]!]!;
    return s;
  }
  if (typeof value === 'bigint' || (typeof value === 'number' && Number.isInteger(value))) {
    return `#${value.toString()}`;
  }
  throw invalid(`a block hash must be bytes or an integer, got ${typeof value}`);
}

function hashList(value: unknown, field: string): HashKey[] {
  if (!Array.isArray(value)) throw invalid(`${field} must be a list of block hashes`);
  return value.map(hashKey);
}

function medium(value: unknown): Medium {
  if (value === null || value === undefined) return DEFAULT_MEDIUM;
  if (typeof value !== 'string') throw invalid('medium must be a string or null');
  return value;
}

function decodeEvent(raw: unknown): KvEvent {
  // Positional struct ["BlockStored", ...fields] (vLLM before its tagged-map change, SGLang),
  // or a tagged map {type: "BlockStored", field: ...} (vLLM since).
  let tag: unknown;
  let get: (index: number, name: string) => unknown;
  if (Array.isArray(raw)) {
    tag = raw[0];
    get = (index) => raw[index + 1];
  } else if (typeof raw === 'object' && raw !== null) {
    const map = raw as Record<string, unknown>;
    tag = map.type;
    get = (_, name) => map[name];
  } else {
    throw invalid('an event must be a tagged list or a map with a type');
  }
  if (tag === 'BlockStored') {
    const tokens = get(2, 'token_ids') ?? [];
    if (!Array.isArray(tokens) || !tokens.every((t) => Number.isInteger(t) && t >= 0)) {
      throw invalid('BlockStored token_ids must be a list of token ids');
    }
    const parent = get(1, 'parent_block_hash');
    const size = get(3, 'block_size');
    if (size !== null && size !== undefined && (!Number.isInteger(size) || (size as number) < 1)) {
      throw invalid('BlockStored block_size must be a positive integer');
    }
    return {
      type: 'BlockStored',
      blockHashes: hashList(get(0, 'block_hashes'), 'BlockStored block_hashes'),
      parentBlockHash: parent === null || parent === undefined ? null : hashKey(parent),
      tokenIds: tokens as number[],
      blockSize: (size as number | null | undefined) ?? undefined,
      medium: medium(get(5, 'medium')),
    };
  }
  if (tag === 'BlockRemoved') {
    return {
      type: 'BlockRemoved',
      blockHashes: hashList(get(0, 'block_hashes'), 'BlockRemoved block_hashes'),
      medium: medium(get(1, 'medium')),
    };
  }
  if (tag === 'AllBlocksCleared') return { type: 'AllBlocksCleared' };
  throw invalid(`unknown event type ${JSON.stringify(tag)}`);
}

/**
 * Decodes one msgpack payload of vLLM's KV event stream, in either encoding: positional
 * (`[ts, events, rank]`, each event `["BlockStored", block_hashes, parent_block_hash, token_ids,
 * block_size, lora_id, medium, lora_name, ...]`) or tagged maps (`{ts, events,
 * data_parallel_rank}`, each event `{type, ...}`). Fields past those read here are ignored.
 * @throws RouterError `INVALID_EVENT` naming what does not follow the schema.
 */
export function decodeKvEventBatch(payload: Uint8Array): KvEventBatch {
  let raw: unknown;
  try {
    raw = unpack(payload);
  } catch (error) {
    throw new RouterError('INVALID_EVENT', `not msgpack: ${(error as Error).message}`, {
      cause: error,
    });
  }
  let ts: unknown;
  let events: unknown;
  let rank: unknown;
  if (Array.isArray(raw)) [ts, events, rank] = raw;
  else if (typeof raw === 'object' && raw !== null) {
    const map = raw as Record<string, unknown>;
    ts = map.ts;
    events = map.events;
    rank = map.data_parallel_rank;
  } else {
    throw invalid('an event batch must be [ts, events, data_parallel_rank] or a map');
  }
  if (typeof ts !== 'number') throw invalid('batch ts must be a number');
  if (!Array.isArray(events)) throw invalid('batch events must be a list');
  return {
    ts,
    events: events.map(decodeEvent),
    dataParallelRank: typeof rank === 'number' ? rank : null,
  };
}
