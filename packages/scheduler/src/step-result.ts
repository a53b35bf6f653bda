// The engine's samples for a plan: checked whole first, then appended to their sequences, with
// stop conditions applied and beam-search groups advanced.
import { advanceBeams } from './beam-search.js';
import { SchedulerError } from './errors.js';
import { FINISHED, RUNNING, type SequenceGroup } from './request-state.js';
import type { RequestTable } from './request-table.js';
import type { StepResult } from './types.js';
import { isTokenId } from './validate.js';

function bad(message: string): never {
  throw new SchedulerError('INVALID_RESULT', message);
}

function checkTokenId(tok: number): void {
  if (!isTokenId(tok)) bad(`bad token id ${tok}`);
}

/**
 * Checks a step result against the live sequences and stamps the sampled ones with `stamp`.
 * Samples of sequences that ended meanwhile (aborted) are skipped.
 * @throws {SchedulerError} INVALID_RESULT for misaligned arrays, a bad token id, a sequence
 *   sampled twice or not waiting for a token, or missing beam candidates.
 */
function checkStepResult(result: StepResult, requests: RequestTable, stamp: number): void {
  const n = result.seqIds.length;
  if (result.tokenIds.length !== n) bad('seqIds and tokenIds differ in length');
  if (result.logprobs && result.logprobs.length !== n) bad('logprobs must align with seqIds');
  const forced = result.forcedTokenIds;
  if (forced && forced.length !== n) bad('forcedTokenIds must align with seqIds');
  const beam = result.beamCandidates;
  if (beam) {
    if (!Number.isInteger(beam.k) || beam.k < 1) bad('beamCandidates.k must be ≥ 1');
    if (beam.tokenIds.length !== n * beam.k || beam.logprobs.length !== n * beam.k) {
      bad('beamCandidates arrays must hold k entries per sample');
    }
  }
  for (let i = 0; i < n; i++) {
    const s = requests.seq(result.seqIds[i]!);
    if (!s?.live || s.group.state === FINISHED) continue;
    if (s.updateStamp === stamp) bad(`sequence ${s.id} sampled twice in one result`);
    s.updateStamp = stamp;
    if (s.group.state !== RUNNING || s.numComputed !== s.numTokens) {
      bad(`sequence ${s.id} of request ${s.group.req.id} was not waiting for a token`);
    }
    const extra = forced?.[i];
    if (extra && extra.length > 0) {
      if (s.group.beamWidth > 1)
        bad(`request ${s.group.req.id} uses beam search: no forced tokens`);
      for (let j = 0; j < extra.length; j++) checkTokenId(extra[j]!);
    }
    if (s.group.beamWidth > 1) {
      if (!beam) bad(`request ${s.group.req.id} uses beam search: beamCandidates required`);
      for (let j = 0; j < beam.k; j++) checkTokenId(beam.tokenIds[i * beam.k + j]!);
    } else {
      checkTokenId(result.tokenIds[i]!);
    }
  }
}

/**
 * Checks `result` (see `checkStepResult`; nothing but stamps changes when it throws), then
 * appends each sampled token (and the tokens forced after it) and ends the sequences that stop. `now` is read once, for the
 * first-token time of requests sampled for the first time.
 */
export function applyStepResult(
  result: StepResult,
  requests: RequestTable,
  stamp: number,
  now: () => number,
  maxModelLen: number,
): void {
  checkStepResult(result, requests, stamp);
  const time = now();
  let beamGroups: Map<SequenceGroup, number[]> | undefined;
  for (let i = 0; i < result.seqIds.length; i++) {
    const s = requests.seq(result.seqIds[i]!);
    if (!s?.live || s.updateStamp !== stamp) continue;
    const g = s.group;
    if (g.firstTokenTime === undefined) g.firstTokenTime = time;
    if (g.beamWidth > 1) {
      // A group's beams are compared with each other, so they advance together below.
      beamGroups ??= new Map();
      let list = beamGroups.get(g);
      if (!list) {
        list = [];
        beamGroups.set(g, list);
      }
      list.push(i);
      continue;
    }
    const tok = result.tokenIds[i]!;
    s.append(tok, maxModelLen);
    if (result.logprobs) s.cumLogprob += result.logprobs[i]!;
    let reason = g.stopReason(s, tok, maxModelLen);
    const extra = result.forcedTokenIds?.[i];
    if (extra) {
      for (let j = 0; j < extra.length && !reason; j++) {
        s.append(extra[j]!, maxModelLen);
        reason = g.stopReason(s, extra[j]!, maxModelLen);
      }
    }
    if (reason) requests.finishSeq(s, reason);
  }
  if (beamGroups) {
    for (const [g, idx] of beamGroups) advanceBeams(requests, g, idx, result, stamp, maxModelLen);
  }
}
