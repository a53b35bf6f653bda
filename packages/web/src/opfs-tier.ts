// The worker's OPFS KV tier: the namespace the blocks are filed under (the model's id and a
// digest of its bytes, the KV layout), the store, and the engine's offload tiers over it.
import type { OffloadTiers } from '@kvasir/engine';
import { kvNamespaceAsync, TieredStore, xxh64 } from '@kvasir/offload/portable';
import type { KvTierReport, OpfsOption } from './opfs-option.js';
import { OpfsStore } from './opfs-store.js';

/** The digest of a model's bytes that its KV blocks are filed under (XXH64 of the GGUF). */
export function weightDigestOf(bytes: Uint8Array): string {
  return `xxh64:${xxh64(bytes).toString(16).padStart(16, '0')}`;
}

/** The layout fields of the namespace. */
export interface OpfsLayout {
  readonly modelId: string;
  readonly weightDigest: string;
  readonly blockSize: number;
  readonly numLayers: number;
  readonly numKvHeads: number;
  readonly headDim: number;
}

/**
 * Opens the OPFS tier of a model, or says why it is off (not asked for; the browser has no
 * OPFS, or it would not open: private browsing may refuse it).
 */
export async function openOpfsTier(
  option: OpfsOption,
  layout: OpfsLayout,
  storage: { getDirectory?: () => Promise<FileSystemDirectoryHandle> } | undefined,
): Promise<{ offload?: OffloadTiers; store?: OpfsStore; report: KvTierReport }> {
  if (option === false) {
    return { report: { opfs: false, maxBytes: 0, reason: 'off (createEngine option opfs)' } };
  }
  if (typeof storage?.getDirectory !== 'function') {
    return {
      report: {
        opfs: false,
        maxBytes: 0,
        reason: 'this browser has no Origin Private File System (navigator.storage.getDirectory)',
      },
    };
  }
  let store: OpfsStore;
  try {
    const namespace = await kvNamespaceAsync({ ...layout, kvDtype: 'f32' });
    store = await OpfsStore.open({
      namespace,
      maxBytes: option.maxBytes,
      root: await storage.getDirectory(),
    });
  } catch (error) {
    return {
      report: {
        opfs: false,
        maxBytes: 0,
        reason: `the Origin Private File System would not open: ${(error as Error).message}`,
      },
    };
  }
  const tiers = [store];
  return {
    offload: { store: new TieredStore({ tiers, writeMode: 'write-through' }), tiers },
    store,
    report: {
      opfs: true,
      maxBytes: option.maxBytes,
      reason: `prefix blocks are kept in the Origin Private File System (${store.stats().entries} there for this model now)`,
    },
  };
}
