// Child process for disk-store.test.ts: another process writing the same key of a shared
// directory over and over. Not part of the public API.
import { DiskStore } from '../disk-store.js';
import { block } from './fixtures.js';

const [dir, namespace, key, rounds] = process.argv.slice(2);
const store = await DiskStore.open({
  namespace: namespace as string,
  dir: dir as string,
  maxBytes: 64 << 20,
});
const v1 = block(1, 256 * 1024);
const v2 = block(2, 256 * 1024);
for (let i = 0; i < Number(rounds); i++) {
  await store.putMany([{ key: key as string, value: i % 2 ? v1 : v2 }]);
}
process.stdout.write(`wrote ${rounds}\n`);
