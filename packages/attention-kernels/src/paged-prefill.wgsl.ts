import { type AttentionShaderOptions, pagedAttentionShader } from './paged-decode.wgsl.js';

/**
 * WGSL of paged causal prefill attention. It is the paged attention kernel of
 * `paged-decode.wgsl.ts` in its `'prefill'` mode: a work item is a few consecutive new tokens of
 * one sequence, its rows pack those tokens with the query heads of one KV head's group (so each
 * K/V row read serves all of them), and row (token i) sees keys `0 .. past + i` where
 * `past = context - query length`. Earlier cached tokens (chunked prefill, prefix-cache hits)
 * and the chunk's own tokens, already written by `writeKvCache`, are all read from the cache.
 */
export type PrefillShaderOptions = Omit<AttentionShaderOptions, 'mode'>;

/** Prefill shader source; bindings: params, query, kv, meta (work items first), out. */
export function pagedPrefillShader(o: PrefillShaderOptions): string {
  return pagedAttentionShader({ ...o, mode: 'prefill' });
}
