// Draws a KV snapshot: the block pool as a grid (one cell per physical block, coloured by
// state, marked with the chats that hold it), each live request's block table, the counters,
// and the events (prefix hits, evictions, compression drops) since the last snapshot. The DOM
// carries what it draws as data attributes, which the tests read back.
import { blockState, type KvBlockState, type WebKvSnapshot } from '@kvasir/web';

/** Colours of the chats, by pane index. */
export const CHAT_COLOURS = ['#2bb3a3', '#8f6cf0', '#f08a3c', '#e0527a'];

/** Who a request is, for the picture: its pane and a short label. */
export interface Owner {
  readonly pane: number;
  readonly label: string;
}

export interface ViewElements {
  readonly grid: HTMLElement;
  readonly tables: HTMLElement;
  readonly counters: HTMLElement;
  readonly events: HTMLElement;
}

export interface Rates {
  readonly tokensPerSecond: number;
  readonly modelBytes: number;
  readonly kvCacheBytes: number;
}

const fmtBytes = (n: number) =>
  n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : `${(n / 1024).toFixed(0)} KiB`;

export class KvView {
  readonly #el: ViewElements;
  #cells: HTMLElement[] = [];
  #last: WebKvSnapshot | undefined;
  readonly #seen = new Set<string>();
  readonly #events: { kind: string; id?: string; text: (who: string) => string }[] = [];

  constructor(elements: ViewElements) {
    this.#el = elements;
  }

  /** Draws `snap`; `owners` names the requests the page started. Returns the state counts. */
  render(
    snap: WebKvSnapshot,
    owners: ReadonlyMap<string, Owner>,
    rates: Rates,
  ): Record<KvBlockState, number> {
    const n = snap.refCounts.length;
    if (this.#cells.length !== n) this.#buildGrid(n);
    const holders: number[][] = Array.from({ length: n }, () => []);
    for (const r of snap.requests) {
      const pane = owners.get(r.id)?.pane ?? -1;
      for (const s of r.seqs) for (const b of s.blocks) holders[b]!.push(pane);
    }
    const counts: Record<KvBlockState, number> = { free: 0, cached: 0, used: 0, shared: 0 };
    for (let b = 0; b < n; b++) {
      const state = blockState(snap, b);
      counts[state]++;
      const cell = this.#cells[b]!;
      const panes = [...new Set(holders[b])];
      const ref = String(snap.refCounts[b]);
      const owned = panes.join(',');
      // Only cells that changed are touched: a redraw mid-chat changes a few.
      if (
        cell.dataset.state === state &&
        cell.dataset.ref === ref &&
        cell.dataset.owners === owned
      ) {
        continue;
      }
      cell.dataset.state = state;
      cell.dataset.ref = ref;
      cell.dataset.owners = owned;
      cell.style.background = cellBackground(state, panes);
      cell.title = `block ${b}: ${state}, ${ref} reference${ref === '1' ? '' : 's'}${snap.hashed[b] ? ', in the prefix cache' : ''}`;
    }
    const grid = this.#el.grid;
    grid.dataset.free = String(counts.free);
    grid.dataset.used = String(counts.used + counts.shared);
    grid.dataset.shared = String(counts.shared);
    grid.dataset.cached = String(counts.cached);
    grid.dataset.steps = String(snap.stats.steps);
    this.#drawTables(snap, owners);
    this.#drawCounters(snap, counts, rates);
    this.#logEvents(snap, owners);
    this.#last = snap;
    return counts;
  }

  #buildGrid(n: number): void {
    this.#el.grid.replaceChildren();
    this.#cells = Array.from({ length: n }, (_, b) => {
      const cell = document.createElement('div');
      cell.className = 'block';
      cell.dataset.block = String(b);
      this.#el.grid.append(cell);
      return cell;
    });
    this.#el.grid.style.setProperty('--columns', String(Math.ceil(Math.sqrt(n * 2))));
  }

  #drawTables(snap: WebKvSnapshot, owners: ReadonlyMap<string, Owner>): void {
    const rows = snap.requests.map((r) => {
      const owner = owners.get(r.id);
      const row = document.createElement('div');
      row.className = 'table-row';
      row.dataset.request = r.id;
      const seq = r.seqs[0];
      row.dataset.blocks = (seq?.blocks ?? []).join(',');
      const label = document.createElement('span');
      label.className = 'table-label';
      label.style.color = owner ? CHAT_COLOURS[owner.pane % CHAT_COLOURS.length]! : '#999';
      label.textContent = `${owner?.label ?? r.id} · ${r.state} · ${seq?.numTokens ?? 0} tok`;
      const chips = document.createElement('span');
      chips.className = 'chips';
      for (const b of seq?.blocks ?? []) {
        const chip = document.createElement('span');
        const state = blockState(snap, b);
        chip.className = `chip ${state}`;
        chip.textContent = String(b);
        chips.append(chip);
      }
      row.append(label, chips);
      return row;
    });
    if (rows.length === 0) {
      const idle = document.createElement('p');
      idle.className = 'idle';
      idle.textContent = 'No live request: finished chats leave their full blocks cached.';
      rows.push(idle as HTMLDivElement);
    }
    this.#el.tables.replaceChildren(...rows);
  }

  #drawCounters(snap: WebKvSnapshot, counts: Record<KvBlockState, number>, rates: Rates): void {
    const s = snap.stats;
    const hitRate =
      snap.counters.prefixQueryTokens === 0
        ? 0
        : snap.counters.prefixHitTokens / snap.counters.prefixQueryTokens;
    // The OPFS tier (when on): blocks kept there, and blocks read back into the pool.
    const inOpfs = s.opfs?.store.entries ?? 0;
    const imported =
      s.opfs?.prefix.importedBlocks ?? Object.values(s.offloadHits).reduce((a, b) => a + b, 0);
    const items: [string, string, string][] = [
      ['free', String(counts.free), 'free blocks'],
      ['used', String(counts.used + counts.shared), 'in use'],
      ['shared', String(counts.shared), 'shared'],
      ['cached', String(counts.cached), 'cached prefix'],
      ['hit-rate', `${(hitRate * 100).toFixed(0)}%`, 'prefix hits (tokens)'],
      ['evictions', String(snap.counters.evictions), 'evictions'],
      ['dropped', String(snap.counters.droppedBlocks), 'compression drops'],
      ['offloaded', String(inOpfs), 'blocks in OPFS'],
      ['imported', String(imported), 'read back from OPFS'],
      ['tps', rates.tokensPerSecond.toFixed(1), 'tokens/s'],
      ['steps', String(s.steps), 'engine steps'],
      [
        'kv-memory',
        fmtBytes(rates.kvCacheBytes),
        `KV cache (${snap.refCounts.length} × ${snap.blockSize} tokens)`,
      ],
      ['model-memory', fmtBytes(rates.modelBytes), 'model'],
    ];
    this.#el.counters.replaceChildren(
      ...items.map(([key, value, label]) => {
        const item = document.createElement('div');
        item.className = 'counter';
        item.dataset.counter = key;
        item.innerHTML = '<b></b><small></small>';
        item.querySelector('b')!.textContent = value;
        item.querySelector('small')!.textContent = label;
        return item;
      }),
    );
  }

  /**
   * Tells that request `id` was admitted with `cachedTokens` from the prefix cache, once (from
   * a snapshot that saw it running, or from its usage when it ended between two snapshots).
   */
  noteAdmitted(id: string, cachedTokens: number): void {
    if (this.#seen.has(id)) return;
    this.#seen.add(id);
    this.#events.push({
      kind: cachedTokens > 0 ? 'hit' : 'miss',
      id,
      text: (who) =>
        cachedTokens > 0
          ? `${who}: prefix hit, ${cachedTokens} prompt tokens reused from cached blocks`
          : `${who}: admitted, no cached prefix`,
    });
  }

  #logEvents(snap: WebKvSnapshot, owners: ReadonlyMap<string, Owner>): void {
    for (const r of snap.requests) {
      if (r.state !== 'waiting') this.noteAdmitted(r.id, r.cachedPromptTokens);
    }
    const last = this.#last;
    if (last) {
      const evicted = snap.counters.evictions - last.counters.evictions;
      const s = evicted === 1 ? '' : 's';
      if (evicted > 0)
        this.#events.push({
          kind: 'evict',
          text: () => `${evicted} cached block${s} evicted to make room`,
        });
      const read =
        (snap.stats.opfs?.prefix.importedBlocks ?? 0) -
        (last.stats.opfs?.prefix.importedBlocks ?? 0);
      const r = read === 1 ? '' : 's';
      if (read > 0)
        this.#events.push({
          kind: 'hit',
          text: () => `${read} block${r} read back from OPFS (a reload or another tab wrote them)`,
        });
      const dropped = snap.counters.droppedBlocks - last.counters.droppedBlocks;
      const d = dropped === 1 ? '' : 's';
      if (dropped > 0)
        this.#events.push({
          kind: 'drop',
          text: () => `KV compression dropped ${dropped} block${d}`,
        });
    }
    this.#events.splice(0, Math.max(0, this.#events.length - 40));
    this.drawEvents(owners);
  }

  /** Redraws the event list, newest first, naming each request by its chat when known. */
  drawEvents(owners: ReadonlyMap<string, Owner>): void {
    this.#el.events.replaceChildren(
      ...this.#events.toReversed().map((e) => {
        const li = document.createElement('li');
        li.className = e.kind;
        li.textContent = e.text(e.id === undefined ? '' : (owners.get(e.id)?.label ?? e.id));
        return li;
      }),
    );
  }
}

const STATE_COLOURS: Record<KvBlockState, string> = {
  free: '#1d2430',
  cached: '#2f5d9e',
  used: '#3f8f5a',
  shared: '#d9a53a',
};

/** A cell's fill: its state's colour, with a stripe per chat holding it. */
function cellBackground(state: KvBlockState, panes: readonly number[]): string {
  const base = STATE_COLOURS[state];
  const mine = panes.filter((p) => p >= 0).map((p) => CHAT_COLOURS[p % CHAT_COLOURS.length]!);
  if (mine.length === 0) return base;
  const stripe = 100 / mine.length;
  const stops = mine.map((c, i) => `${c} ${i * stripe}% ${(i + 1) * stripe}%`).join(', ');
  return `linear-gradient(${base}, ${base}) top / 100% 72% no-repeat, linear-gradient(90deg, ${stops})`;
}
