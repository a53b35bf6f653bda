// A routing policy with the load term off, for `bench/router.ts --policies longest-prefix`: the
// replica whose cache holds the longest prefix of the prompt (by the router's index), ties to the
// fewest requests in flight, then in turn. It measures how much hit rate the kv-aware cost gives
// up to spread load.
let turn = 0;
export default {
  specificationVersion: 'v1',
  name: 'longest-prefix',
  choose(_request, candidates) {
    let best = [];
    for (const c of candidates) {
      const b = best[0];
      if (
        b === undefined ||
        c.cachedWeighted > b.cachedWeighted ||
        (c.cachedWeighted === b.cachedWeighted && c.inFlight < b.inFlight)
      ) {
        best = [c];
      } else if (c.cachedWeighted === b.cachedWeighted && c.inFlight === b.inFlight) {
        best.push(c);
      }
    }
    return best[turn++ % best.length];
  },
  explain: (request, c) =>
    `longest-prefix: ${c.cachedBlocks}/${request.promptBlocks} cached, ${c.inFlight} in flight`,
};
