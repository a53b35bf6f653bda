// Renders tooling/eval/kv-compression.sh's JSON lines as the markdown table of the mini-model
// card: node tooling/eval/kv-compression-table.mjs packages/mini-model/bench/kv-compression.jsonl
import { readFileSync } from 'node:fs';

const rows = readFileSync(process.argv[2], 'utf8')
  .split('\n')
  .filter((l) => l.trim() !== '')
  .map((l) => JSON.parse(l));
const full = rows.find((r) => r.group === 'full');
const fmt = (n, d = 0) =>
  n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });
const groups = {
  full: 'full cache',
  blocks16: 'blocks of 16',
  tokens1: 'token-exact (blocks of 1)',
  small: 'small windows (blocks of 1)',
  original: 'first 512 tokens',
};
console.log(
  '| rows | policy | positions | tokens | KV held (max) | tokens dropped | perplexity | ΔPPL vs full cache | decode tok/s |',
);
console.log('|---|---|---|---|---|---|---|---|---|');
for (const r of rows) {
  const stream = r.mode === 'stream';
  const ref = r.group === 'original' ? r.reference?.perplexity : full?.perplexity;
  const delta =
    ref === undefined ? '—' : `${r.perplexity - ref >= 0 ? '+' : ''}${fmt(r.perplexity - ref, 3)}`;
  console.log(
    `| ${groups[r.group] ?? r.group} | ${r.row} | ${stream ? r.positions : 'original'} | ${fmt(r.tokens)} | ${
      stream
        ? `${fmt(r.max_kv_bytes_held / 1024)} KiB`
        : `${fmt((r.ctx * 4096) / 1024)} KiB (window of ${r.ctx})`
    } | ${stream ? fmt(r.tokens_dropped) : '—'} | ${fmt(r.perplexity, 3)} | ${r === full ? '—' : delta} | ${
      stream ? fmt(r.decode_tokens_per_second) : '—'
    } |`,
  );
}
