#!/usr/bin/env python3
"""Chat-template fixtures: real models' templates (llama.cpp's models/templates/*.jinja, copied
from the models' tokenizer_config.json) rendered by Python's jinja2 the way transformers'
apply_chat_template renders them (sandboxed environment, trim_blocks, lstrip_blocks, the
loopcontrols extension, raise_exception, transformers' tojson), for @kvasir/model's
renderChatTemplate (@huggingface/jinja) to match. Conversations: a system prompt and two turns,
a single user turn, and, for templates that take tools, one function definition.

Writes tooling/ggml-fixtures/chat-templates.json.
  PYTHON=python3 tooling/ggml-fixtures/make_chat_template_fixtures.py   (a Python with jinja2)
"""

import argparse
import json
from datetime import datetime
from pathlib import Path

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
parser = argparse.ArgumentParser()
parser.add_argument("--llama-cpp", default=str(ROOT / "tooling/llama.cpp/src"))
parser.add_argument("--out", default=str(HERE / "chat-templates.json"))
args = parser.parse_args()

# template file, bos, eos, whether it takes tools
TEMPLATES = [
    ("Qwen-Qwen2.5-7B-Instruct.jinja", None, "<|im_end|>", True),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<｜begin▁of▁sentence｜>",
     "<｜end▁of▁sentence｜>", False),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>", True),
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", True),
    ("Qwen-Qwen3-0.6B.jinja", None, "<|im_end|>", True),
    ("HuggingFaceTB-SmolLM3-3B.jinja", None, "<|im_end|>", False),
    ("microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>", False),
    # gpt-oss's harmony format (system, developer and channel headers; tools as a TypeScript
    # namespace); it prints today's date through strftime_now, pinned to NOW below.
    ("openai-gpt-oss-120b.jinja", "<|startoftext|>", "<|return|>", True),
]
# The date strftime_now gives every template (the tests pass the same one).
NOW = datetime(2026, 12, 4, 5, 30, 0)
CHATS = [
    [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Hi 👋, what's 12345 + 678?"},
        {"role": "assistant", "content": "13023."},
        {"role": "user", "content": "And ×2?\n(no words)"},
    ],
    [{"role": "user", "content": "Hello"}],
]
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}]


def raise_exception(message):
    raise ValueError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' own filter (jinja2's escapes HTML characters)
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)

cases = []
for name, bos, eos, takes_tools in TEMPLATES:
    source = (Path(args.llama_cpp) / "models/templates" / name).read_text(encoding="utf-8")
    template = env.from_string(source)
    specials = {"bos_token": bos or "", "eos_token": eos or ""}
    for messages in CHATS:
        for tools in ([None, TOOLS] if takes_tools else [None]):
            variables = {**specials, "messages": messages, "add_generation_prompt": True}
            if tools is not None:
                variables["tools"] = tools
            cases.append({"template": name, "bos_token": bos, "eos_token": eos,
                          "messages": messages, "tools": tools,
                          "rendered": template.render(**variables)})
templates = {name: (Path(args.llama_cpp) / "models/templates" / name).read_text(encoding="utf-8")
             for name, *_ in TEMPLATES}
Path(args.out).write_text(json.dumps({"templates": templates, "cases": cases}, ensure_ascii=False,
                                     indent=1) + "\n", encoding="utf-8")
print(f"{len(cases)} renderings of {len(templates)} templates -> {args.out}")
