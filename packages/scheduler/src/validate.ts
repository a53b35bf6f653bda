import { SchedulerError } from './errors.js';
import { validateKvCompressionPolicy } from './kv-compression/policy.js';
import type { SchedulerRequest } from './types.js';

// Plans carry token ids in Int32Arrays; no vocabulary comes near 2^31.
const MAX_TOKEN_ID = 0x7fffffff;

function invalid(field: string, message: string, value: unknown): never {
  throw new SchedulerError('INVALID_REQUEST', `${field}: ${message}`, {
    details: { field, value },
  });
}

/** An integer token id that fits a plan's Int32Array. */
export function isTokenId(t: unknown): boolean {
  return typeof t === 'number' && Number.isInteger(t) && t >= 0 && t <= MAX_TOKEN_ID;
}

function groupLimit(l: RequestLimits): number {
  return Math.min(l.maxNumSeqs, l.maxNumBatchedTokens ?? Number.POSITIVE_INFINITY);
}

function groupLimitText(l: RequestLimits): string {
  return l.maxNumBatchedTokens !== undefined && l.maxNumBatchedTokens < l.maxNumSeqs
    ? `maxNumBatchedTokens ${l.maxNumBatchedTokens}`
    : `maxNumSeqs ${l.maxNumSeqs}`;
}

/** Limits a request is checked against. */
export interface RequestLimits {
  readonly maxModelLen: number;
  readonly maxNumSeqs: number;
  /** The group's decodes run in one step, so n and beamWidth must fit the token budget too. */
  readonly maxNumBatchedTokens?: number;
  /** The cache's block size: checks a `kvCompression` budget (default 16). */
  readonly blockSize?: number;
}

/**
 * Checks a request before anything is created for it.
 * @throws {SchedulerError} INVALID_REQUEST naming the offending field; INVALID_POLICY when its
 *   KV compression policy's `maxBlocks` throws.
 */
export function validateRequest(req: SchedulerRequest, limits: RequestLimits): void {
  checkRequest(req, limits);
}

/**
 * {@link validateRequest}, returning what the scheduler keeps of the check: the blocks the
 * request's compression policy may hold (`maxBlocks`, read once here so that a policy cannot
 * fail while a step is planned), 0 without compression.
 */
export function checkRequest(req: SchedulerRequest, limits: RequestLimits): { keepBlocks: number } {
  if (req === null || typeof req !== 'object') invalid('request', 'must be an object', req);
  if (typeof req.id !== 'string' || req.id.length === 0) {
    invalid('id', 'must be a non-empty string', req.id);
  }
  const prompt = req.promptTokenIds;
  if (prompt === null || typeof prompt !== 'object' || typeof prompt.length !== 'number') {
    invalid('promptTokenIds', 'must be an array of token ids', prompt);
  }
  if (prompt.length === 0) invalid('promptTokenIds', 'must not be empty', prompt.length);
  const keepBlocks = req.kvCompression === undefined ? 0 : checkKvCompression(req, limits);
  const streams =
    keepBlocks > 0 &&
    req.kvCompression!.positions === 'cache' &&
    req.kvCompression!.policy.attention !== 'prefill-end';
  if (prompt.length > limits.maxModelLen && !streams) {
    invalid(
      'promptTokenIds',
      `prompt has ${prompt.length} tokens, over maxModelLen ${limits.maxModelLen}${req.kvCompression ? ` (only a compression policy that drops blocks during prefill, in 'cache' positions, streams a longer prompt)` : ''}`,
      prompt.length,
    );
  }
  for (let i = 0; i < prompt.length; i++) {
    if (!isTokenId(prompt[i])) {
      invalid(`promptTokenIds[${i}]`, 'is not an integer token id in [0, 2^31)', prompt[i]);
    }
  }
  if (typeof req.maxTokens !== 'number' || !Number.isInteger(req.maxTokens) || req.maxTokens < 1) {
    invalid('maxTokens', 'must be an integer ≥ 1', req.maxTokens);
  }
  if (req.n !== undefined) {
    if (typeof req.n !== 'number' || !Number.isInteger(req.n) || req.n < 1) {
      invalid('n', 'must be an integer ≥ 1', req.n);
    }
    if (req.n > groupLimit(limits)) {
      invalid('n', `exceeds ${groupLimitText(limits)}, so it could never run`, req.n);
    }
  }
  if (req.beamWidth !== undefined) {
    if (
      typeof req.beamWidth !== 'number' ||
      !Number.isInteger(req.beamWidth) ||
      req.beamWidth < 2
    ) {
      invalid('beamWidth', 'must be an integer ≥ 2', req.beamWidth);
    }
    if (req.beamWidth > groupLimit(limits)) {
      invalid('beamWidth', `exceeds ${groupLimitText(limits)}`, req.beamWidth);
    }
    if (req.n !== undefined && req.n > 1)
      invalid('beamWidth', 'cannot be combined with n > 1', req.n);
  }
  if (req.stopTokenIds !== undefined) {
    if (!Array.isArray(req.stopTokenIds)) {
      invalid('stopTokenIds', 'must be an array of token ids', req.stopTokenIds);
    }
    for (let i = 0; i < req.stopTokenIds.length; i++) {
      if (!isTokenId(req.stopTokenIds[i])) {
        invalid(
          `stopTokenIds[${i}]`,
          'is not an integer token id in [0, 2^31)',
          req.stopTokenIds[i],
        );
      }
    }
  }
  if (req.eosTokenId !== undefined && !isTokenId(req.eosTokenId)) {
    invalid('eosTokenId', 'is not an integer token id in [0, 2^31)', req.eosTokenId);
  }
  if (req.ignoreEos !== undefined && typeof req.ignoreEos !== 'boolean') {
    invalid('ignoreEos', 'must be a boolean', req.ignoreEos);
  }
  if (req.skipPrefixCache !== undefined && typeof req.skipPrefixCache !== 'boolean') {
    invalid('skipPrefixCache', 'must be a boolean', req.skipPrefixCache);
  }
  if (req.priority !== undefined) {
    if (typeof req.priority !== 'number' || !Number.isFinite(req.priority)) {
      invalid('priority', `must be a finite number, got ${typeof req.priority}`, req.priority);
    }
  }
  if (req.kvCompression !== undefined && req.beamWidth !== undefined && req.beamWidth > 1) {
    invalid('kvCompression', 'cannot be combined with beam search (beamWidth)', req.beamWidth);
  }
  if (req.arrivalTime !== undefined) {
    if (typeof req.arrivalTime !== 'number' || !Number.isFinite(req.arrivalTime)) {
      invalid('arrivalTime', 'must be a finite number', req.arrivalTime);
    }
  }
  return { keepBlocks };
}

/**
 * Checks `req.kvCompression` against the cache; returns the blocks its policy may hold.
 * @throws {SchedulerError} INVALID_REQUEST naming what is wrong; INVALID_POLICY when the
 *   policy's `maxBlocks` throws (a bug of the policy, not of the request).
 */
function checkKvCompression(req: SchedulerRequest, limits: RequestLimits): number {
  const spec = req.kvCompression;
  if (spec === null || typeof spec !== 'object') {
    invalid('kvCompression', 'must be { policy, positions }', spec);
  }
  try {
    validateKvCompressionPolicy(spec.policy);
  } catch (e) {
    invalid('kvCompression.policy', (e as Error).message, undefined);
  }
  if (spec.positions !== 'cache' && spec.positions !== 'original') {
    invalid('kvCompression.positions', "must be 'cache' or 'original'", spec.positions);
  }
  const bs = limits.blockSize ?? 16;
  let blocks: number;
  try {
    blocks = spec.policy.maxBlocks(bs);
  } catch (error) {
    throw new SchedulerError(
      'INVALID_POLICY',
      `KV compression policy ${spec.policy.name}: maxBlocks(${bs}) threw: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error, details: { policy: spec.policy.name } },
    );
  }
  if (!Number.isInteger(blocks) || blocks < 2) {
    invalid(
      'kvCompression',
      `${spec.policy.name} holds ${String(blocks)} block(s) of ${bs} tokens; its budget must cover at least 2 blocks`,
      blocks,
    );
  }
  if (spec.positions === 'original') return blocks;
  // The largest position a decode reaches is the cache size: every held block full.
  if (blocks * bs >= limits.maxModelLen) {
    invalid(
      'kvCompression',
      `${spec.policy.name} holds up to ${blocks} blocks (${blocks * bs} tokens), so 'cache' positions would reach maxModelLen ${limits.maxModelLen}: keep its budget under ${limits.maxModelLen} tokens in whole blocks of ${bs}, or use positions 'original'`,
      blocks,
    );
  }
  return blocks;
}
