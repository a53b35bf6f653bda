import { pack } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { RouterError } from './errors.js';
import { decodeKvEventBatch, hashKey } from './kv-event-decoder.js';

const h = (n: number) => Buffer.alloc(16, n);

describe('decodeKvEventBatch', () => {
  it('reads the positional and the tagged-map encodings alike', () => {
    const positional = pack([
      1700000000.5,
      [
        [
          'BlockStored',
          [h(1), h(2)],
          null,
          Array.from({ length: 32 }, (_, i) => i),
          16,
          null,
          'GPU',
          null,
        ],
        ['BlockStored', [h(3)], h(2), [], 16, null, 'CPU', null, [null], 0],
        ['BlockRemoved', [h(1)], 'GPU'],
        ['BlockRemoved', [h(3)], null, 0],
        ['AllBlocksCleared'],
      ],
      0,
    ]);
    const tagged = pack({
      ts: 1700000000.5,
      events: [
        {
          type: 'BlockStored',
          block_hashes: [h(1), h(2)],
          parent_block_hash: null,
          token_ids: Array.from({ length: 32 }, (_, i) => i),
          block_size: 16,
          lora_id: null,
          medium: 'GPU',
          lora_name: null,
        },
        {
          type: 'BlockStored',
          block_hashes: [h(3)],
          parent_block_hash: h(2),
          token_ids: [],
          block_size: 16,
          lora_id: null,
          medium: 'CPU',
          lora_name: null,
          extra_keys: [null],
          group_idx: 0,
        },
        { type: 'BlockRemoved', block_hashes: [h(1)], medium: 'GPU' },
        { type: 'BlockRemoved', block_hashes: [h(3)], medium: null, group_idx: 0 },
        { type: 'AllBlocksCleared' },
      ],
      data_parallel_rank: 0,
    });
    const a = decodeKvEventBatch(positional);
    expect(decodeKvEventBatch(tagged)).toEqual(a);
    expect(a.ts).toBe(1700000000.5);
    expect(a.dataParallelRank).toBe(0);
    expect(a.events[0]).toEqual({
      type: 'BlockStored',
      blockHashes: ['01'.repeat(16), '02'.repeat(16)],
      parentBlockHash: null,
      tokenIds: Array.from({ length: 32 }, (_, i) => i),
      blockSize: 16,
      medium: 'GPU',
    });
    expect(a.events[1]).toMatchObject({ parentBlockHash: '02'.repeat(16), medium: 'CPU' });
    // A medium of null is vLLM's engine pool.
    expect(a.events[3]).toEqual({
      type: 'BlockRemoved',
      blockHashes: ['03'.repeat(16)],
      medium: 'GPU',
    });
    expect(a.events[4]).toEqual({ type: 'AllBlocksCleared' });
  });

  it('keys integer hashes apart from bytes', () => {
    expect(hashKey(42)).toBe('#42');
    expect(hashKey(2n ** 63n)).toBe(`#${2n ** 63n}`);
    expect(hashKey(new Uint8Array([0, 255]))).toBe('00ff');
  });

  it.each([
    ['not msgpack', Buffer.from([0xc1])],
    ['a batch that is a number', pack(3)],
    ['ts not a number', pack(['x', [], 0])],
    ['an unknown event', pack([1, [['BlockMoved', []]], 0])],
    ['hashes that are strings', pack([1, [['BlockRemoved', ['ab'], 'GPU']], 0])],
    [
      'negative token ids',
      pack([1, [['BlockStored', [h(1)], null, [-1], 16, null, 'GPU', null]], 0]),
    ],
    ['a zero block size', pack([1, [['BlockStored', [h(1)], null, [], 0, null, 'GPU', null]], 0])],
  ])('refuses %s with INVALID_EVENT', (_, payload) => {
    let caught: unknown;
    try {
      decodeKvEventBatch(payload);
    } catch (error) {
      caught = error;
    }
    expect(RouterError.isInstance(caught)).toBe(true);
    expect((caught as RouterError).code).toBe('INVALID_EVENT');
  });
});
