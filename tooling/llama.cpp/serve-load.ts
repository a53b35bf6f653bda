// The client side of compare-serve.sh: `concurrency` greedy completions sent at once to an
// OpenAI-compatible server (`kvasir serve` or llama.cpp's `llama-server`), each a prompt of
// token ids and `max_tokens` new tokens with EOS ignored, timed from the first request sent to
// the last answer. Prints one JSON line.
//   tsx serve-load.ts <base url> <concurrency> <new tokens> <prompt tokens> <seed>
//
// Prompts are token ids (both servers read the GGUF's vocabulary), different for every request
// and seed, so neither server's prefix cache serves a later round from an earlier one.

const [url, concurrencyArg, newArg, promptArg, seedArg] = process.argv.slice(2);
if (!url) {
  throw new Error(
    'usage: serve-load.ts <base url> <concurrency> <new tokens> <prompt tokens> <seed>',
  );
}
const concurrency = Number(concurrencyArg ?? 8);
const newTokens = Number(newArg ?? 64);
const promptTokens = Number(promptArg ?? 16);
const seed = Number(seedArg ?? 0);

const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string }[] };
const model = models.data[0]?.id;
if (!model) throw new Error(`${url}/v1/models lists no model`);

// Ids from 100 up: clear of the control tokens a vocabulary starts with.
const prompt = (i: number) =>
  Array.from(
    { length: promptTokens },
    (_, j) => 100 + ((seed * 7919 + i * 104729 + j * 31) % 20000),
  );

async function one(i: number): Promise<number> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model,
      prompt: prompt(i),
      max_tokens: newTokens,
      temperature: 0,
      ignore_eos: true,
      stream: false,
    }),
  });
  const body = (await res.json()) as { usage?: { completion_tokens?: number } };
  if (!res.ok) throw new Error(`request ${i}: ${res.status} ${JSON.stringify(body)}`);
  const n = body.usage?.completion_tokens ?? 0;
  if (n !== newTokens) throw new Error(`request ${i}: ${n} completion tokens, asked ${newTokens}`);
  return n;
}

const t0 = performance.now();
const tokens = await Promise.all(Array.from({ length: concurrency }, (_, i) => one(i)));
const seconds = (performance.now() - t0) / 1000;
const total = tokens.reduce((a, b) => a + b, 0);
console.log(
  JSON.stringify({
    concurrency,
    new_tokens: newTokens,
    prompt_tokens: promptTokens,
    completion_tokens: total,
    seconds: +seconds.toFixed(3),
    tok_s: +(total / seconds).toFixed(2),
  }),
);
