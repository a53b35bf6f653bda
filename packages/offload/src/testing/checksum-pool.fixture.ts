// Child process for checksum-pool.test.ts: hashes on worker threads and never closes anything.
// Its top-level awaits wait on nothing but a worker's answer (the process must stay alive for
// it), and then it must exit by itself (idle workers must not hold it). Not part of the public API.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChecksumPool } from '../checksum-pool.js';
import { DiskStore } from '../disk-store.js';
import { xxh64 } from '../xxh64.js';
import { block, key, NS } from './fixtures.js';

const data = block(7, 3 << 20);
const pool = new ChecksumPool(2);
const own = new Uint8Array(data);
const { sum } = await pool.hashTransfer(own);
const dir = await mkdtemp(join(tmpdir(), 'kvasir-pool-'));
const store = await DiskStore.open({ namespace: NS, dir, maxBytes: 64 << 20, checksumThreads: 2 });
await store.putMany([{ key: key(1), value: data }]);
const [back] = await store.getMany([key(1)]);
await rm(dir, { recursive: true, force: true });
const ok = sum === xxh64(data) && back !== undefined && xxh64(back) === sum;
process.stdout.write(ok ? 'same digest\n' : 'different digest\n');
