import { execFileSync } from 'node:child_process';
import { cp, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { makeModelConfig } from '../config.js';
import { expectModelError } from '../testing/checkpoint.js';
import { ModelTokenizer } from '../tokenizer/tokenizer.js';
import { openGgufCheckpoint } from './gguf/reader.js';
import { openCheckpoint } from './open-checkpoint.js';
import { writeRandomCheckpoint } from './random-checkpoint.js';

const config = makeModelConfig({
  hiddenSize: 32,
  intermediateSize: 48,
  numLayers: 1,
  numHeads: 4,
  vocabSize: 320,
});

let root: string;
let hf: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-regular-file-'));
  hf = join(root, 'hf');
  await writeRandomCheckpoint(hf, config, 1);
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

function mkfifo(path: string): string {
  execFileSync('mkfifo', [path]);
  return path;
}

/** A copy of the random checkpoint directory with `name` replaced by a FIFO. */
async function withFifo(name: string): Promise<string> {
  const dir = join(root, `fifo-${name}`);
  await cp(hf, dir, { recursive: true });
  await rm(join(dir, name));
  mkfifo(join(dir, name));
  return dir;
}

// Opening a FIFO for reading blocks until a writer opens it: without the check these hang.
describe('a model path that is not a regular file is refused at once, never opened', () => {
  it('a FIFO, a character device or a directory given as the GGUF file', async () => {
    const fifo = mkfifo(join(root, 'model.gguf'));
    await expectModelError(openCheckpoint(fifo), 'IO', `checkpoint ${fifo} is a FIFO`);
    await expectModelError(openGgufCheckpoint(fifo), 'IO', 'is a FIFO, not a regular file');
    await expectModelError(openCheckpoint('/dev/zero'), 'IO', 'is a character device');
    const dir = join(root, 'dir.gguf');
    await mkdir(dir);
    await expectModelError(openGgufCheckpoint(dir), 'IO', `${dir} is a directory`);
  });

  it('a FIFO as a safetensors shard, config.json or index', async () => {
    await expectModelError(
      openCheckpoint(await withFifo('model.safetensors')),
      'IO',
      'safetensors shard',
    );
    await expectModelError(openCheckpoint(await withFifo('config.json')), 'IO', 'is a FIFO');
    const indexed = join(root, 'fifo-index');
    await cp(hf, indexed, { recursive: true });
    mkfifo(join(indexed, 'model.safetensors.index.json'));
    await expectModelError(openCheckpoint(indexed), 'IO', 'model.safetensors.index.json');
  });

  it("a FIFO as the tokenizer's GGUF file or one of its JSON files", async () => {
    const fifo = mkfifo(join(root, 'tok-fifo.gguf'));
    await expectModelError(ModelTokenizer.load(fifo), 'IO', 'tokenizer file');
    for (const name of ['tokenizer.json', 'tokenizer_config.json']) {
      await expectModelError(ModelTokenizer.load(await withFifo(name)), 'IO', `${name} is a FIFO`);
    }
    // An optional file that is a FIFO is an error too, not read as absent.
    const template = await withFifo('tokenizer_config.json');
    await rm(join(template, 'tokenizer_config.json'));
    mkfifo(join(template, 'chat_template.jinja'));
    await expectModelError(ModelTokenizer.load(template), 'IO', 'chat_template.jinja is a FIFO');
    // Absent optional files are still optional.
    await rm(join(template, 'chat_template.jinja'));
    await ModelTokenizer.load(template);
  });
});
