// Beam search: each step keeps the `beamWidth` best continuations over all of a group's beams,
// forking the beams that continue more than once and dropping those that do not continue.
import type { Sequence, SequenceGroup } from './request-state.js';
import type { RequestTable } from './request-table.js';
import type { StepResult } from './types.js';

interface Candidate {
  seq: Sequence;
  tok: number;
  score: number;
}

/**
 * Advances a beam-search group by one step from the candidates of its sampled beams
 * (`sampleIdx`: their positions in `result`; `stamp`: the `update()` call, which marks the
 * beams sampled in it). Ends the group when `beamWidth` hypotheses finished, no beam is left,
 * or a beam reached `maxTokens` or `maxModelLen`.
 */
export function advanceBeams(
  requests: RequestTable,
  g: SequenceGroup,
  sampleIdx: readonly number[],
  result: StepResult,
  stamp: number,
  maxModelLen: number,
): void {
  const beam = result.beamCandidates!;
  const k = beam.k;
  const cands: Candidate[] = [];
  for (const i of sampleIdx) {
    const s = requests.seq(result.seqIds[i]!)!;
    for (let j = 0; j < k; j++) {
      cands.push({
        seq: s,
        tok: beam.tokenIds[i * k + j]!,
        score: s.cumLogprob + beam.logprobs[i * k + j]!,
      });
    }
  }
  // Ties break by beam index, not global ids, so results do not depend on scheduling.
  cands.sort((a, b) => b.score - a.score || a.seq.index - b.seq.index || a.tok - b.tok);
  // Beams not sampled in this result (after recompute, a group's prefills may land in
  // different steps) keep their places in the width.
  let waitingBeams = 0;
  for (const s of g.seqs) if (s.live && s.updateStamp !== stamp) waitingBeams++;
  const width = g.beamWidth - waitingBeams;
  const chosen: Candidate[] = [];
  for (const c of cands) {
    if (chosen.length + g.finishedBeams.length >= width) break;
    if (g.isStopToken(c.tok)) {
      const out = new Int32Array(c.seq.numOutputTokens + 1);
      out.set(c.seq.tokens.subarray(g.numPromptTokens, c.seq.numTokens));
      out[out.length - 1] = c.tok;
      g.finishedBeams.push({
        index: 0,
        tokenIds: out,
        finishReason: 'stop',
        cumulativeLogprob: c.score,
      });
    } else {
      chosen.push(c);
    }
  }
  // Forks come first (they copy the parent's state before it changes), then pruning, then
  // appends.
  const uses = new Map<Sequence, number>();
  const targets: Sequence[] = [];
  for (const c of chosen) {
    const u = uses.get(c.seq) ?? 0;
    uses.set(c.seq, u + 1);
    targets.push(u === 0 ? c.seq : requests.fork(c.seq));
  }
  for (const i of sampleIdx) {
    const s = requests.seq(result.seqIds[i]!)!;
    if (!uses.has(s)) requests.drop(s);
  }
  for (let j = 0; j < chosen.length; j++) {
    const s = targets[j]!;
    s.append(chosen[j]!.tok, maxModelLen);
    s.cumLogprob = chosen[j]!.score;
  }
  const anyLive = g.seqs.some((s) => s.live);
  const done =
    g.finishedBeams.length >= g.beamWidth ||
    !anyLive ||
    g.seqs.some(
      (s) => s.live && (s.numOutputTokens >= g.req.maxTokens || s.numTokens >= maxModelLen),
    );
  if (done) {
    if (!anyLive) requests.finish(g, 'stop', undefined);
    else for (const s of g.seqs) if (s.live) requests.finishSeq(s, 'length');
  }
}
