import type { RequestRecord } from './load.js';

const W = 800;
const PANEL_H = 220;
const PAD = { left: 60, right: 20, top: 30, bottom: 30 };

function esc(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function panel(
  y0: number,
  title: string,
  xMax: number,
  yMax: number,
  yUnit: string,
  body: (x: (v: number) => number, y: (v: number) => number) => string,
): string {
  const innerW = W - PAD.left - PAD.right;
  const innerH = PANEL_H - PAD.top - PAD.bottom;
  const x = (v: number) => PAD.left + (xMax > 0 ? (v / xMax) * innerW : 0);
  const y = (v: number) => y0 + PAD.top + innerH - (yMax > 0 ? (v / yMax) * innerH : 0);
  const ticks = [0, 0.25, 0.5, 0.75, 1]
    .map((f) => {
      const yy = y(f * yMax);
      return `<line x1="${PAD.left}" x2="${W - PAD.right}" y1="${yy}" y2="${yy}" stroke="#eee"/><text x="${PAD.left - 6}" y="${yy + 4}" font-size="10" text-anchor="end">${(f * yMax).toFixed(yMax < 10 ? 2 : 0)}</text>`;
    })
    .join('');
  const xTicks = [0, 0.25, 0.5, 0.75, 1]
    .map(
      (f) =>
        `<text x="${x(f * xMax)}" y="${y0 + PANEL_H - 10}" font-size="10" text-anchor="middle">${(f * xMax).toFixed(1)} s</text>`,
    )
    .join('');
  return `<g><text x="${PAD.left}" y="${y0 + 18}" font-size="13" font-weight="bold">${esc(title)} (${esc(yUnit)})</text>${ticks}${xTicks}<line x1="${PAD.left}" x2="${PAD.left}" y1="${y0 + PAD.top}" y2="${y0 + PANEL_H - PAD.bottom}" stroke="#999"/>${body(x, y)}</g>`;
}

/**
 * An SVG chart of a load run: generated-token throughput per second over the run, and each
 * request's time to first token and end-to-end latency at the time it finished.
 */
export function renderLoadChart(records: readonly RequestRecord[], title: string): string {
  const done = records.filter((r) => r.error === undefined);
  const end = Math.max(1, ...records.map((r) => (r.startMs + r.e2eMs) / 1000));
  const buckets = new Array<number>(Math.ceil(end)).fill(0);
  for (const r of done) {
    // Spread each request's tokens uniformly between its first and last token.
    const first = (r.startMs + r.ttftMs) / 1000;
    const last = (r.startMs + r.e2eMs) / 1000;
    for (let k = 0; k < r.outputTokens; k++) {
      const t = r.outputTokens === 1 ? last : first + ((last - first) * k) / (r.outputTokens - 1);
      const b = Math.min(buckets.length - 1, Math.floor(t));
      buckets[b]! += 1;
    }
  }
  const tpMax = Math.max(1, ...buckets) * 1.1;
  const throughput = panel(0, 'Generated tokens per second', end, tpMax, 'tok/s', (x, y) => {
    const pts = buckets.map((v, i) => `${x(i + 0.5).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
    return `<polyline fill="none" stroke="#2563eb" stroke-width="2" points="${pts}"/>`;
  });
  const latMax = Math.max(1, ...done.map((r) => r.e2eMs)) * 1.1;
  const latency = panel(PANEL_H, 'Latency per request', end, latMax, 'ms', (x, y) =>
    done
      .map((r) => {
        const t = (r.startMs + r.e2eMs) / 1000;
        return `<circle cx="${x(t).toFixed(1)}" cy="${y(r.ttftMs).toFixed(1)}" r="2" fill="#16a34a"/><circle cx="${x(t).toFixed(1)}" cy="${y(r.e2eMs).toFixed(1)}" r="2" fill="#dc2626"/>`;
      })
      .join(''),
  );
  const legend = `<text x="${W - 260}" y="${PANEL_H + 18}" font-size="11"><tspan fill="#16a34a">● TTFT</tspan>  <tspan fill="#dc2626">● end-to-end</tspan></text>`;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${PANEL_H * 2 + 20}" font-family="sans-serif"><title>${esc(title)}</title><rect width="100%" height="100%" fill="white"/>${throughput}${latency}${legend}</svg>\n`;
}
