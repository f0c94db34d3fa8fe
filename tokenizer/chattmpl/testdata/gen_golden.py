#!/usr/bin/python3
"""Writes golden.json: the published chat templates in templates/ rendered
by the reference engine (Jinja2, as Debian's python3-jinja2 ships it) in the
environment Hugging Face transformers' apply_chat_template sets up
(transformers/utils/chat_template_utils.py): an ImmutableSandboxedEnvironment
with trim_blocks, lstrip_blocks and the loopcontrols extension, the
{% generation %} tag, raise_exception, strftime_now, and tojson as
json.dumps (ensure_ascii=False, keys in insertion order). The special tokens
are passed as transformers passes special_tokens_map (only the tokens set),
then tools, documents=None, add_generation_prompt and the extra kwargs.

Each case records its inputs beside the expected text (or the expected
error), so the Go test needs only golden.json. Run from this directory:

    python3 gen_golden.py

The clock strftime_now reads is fixed per case ("now"), so the golden
files do not change with the day they are made.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(Extension):
    # transformers' AssistantTracker, without the mask: {% generation %}
    # renders its body.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def render(source, case):
    now = datetime.fromisoformat(case["now"])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    tmpl = env.from_string(source)
    kwargs = dict(case["special_tokens"])
    kwargs.update(case.get("kwargs", {}))
    return tmpl.render(messages=case["messages"], tools=case.get("tools"), documents=None,
                       add_generation_prompt=case["add_generation_prompt"], **kwargs)


# The special tokens each model's tokenizer_config.json sets.
QWEN = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
LLAMA3 = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
GEMMA2 = {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"}
GEMMA3 = {"bos_token": "<bos>", "eos_token": "<end_of_turn>", "unk_token": "<unk>", "pad_token": "<pad>"}
MISTRAL = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}

SYS = {"role": "system", "content": "You are a terse assistant. Answer in one line."}
U1 = {"role": "user", "content": "What is the capital of France?"}
A1 = {"role": "assistant", "content": "Paris."}
U2 = {"role": "user", "content": "  And of Germany? Say \"Berlin\" <b>& more</b>, café, 東京.  \n"}
A2 = {"role": "assistant", "content": "Berlin.\n"}

WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "description": "The city, e.g. Paris"},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current time in a zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}
UW = {"role": "user", "content": "What's the weather in Paris?"}
CALL = {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}
RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}
AW = {"role": "assistant", "content": "It is 21 °C and clear in Paris."}

NOW = "2026-11-27T09:30:00"

BASIC = [
    ("system-user", [SYS, U1]),
    ("user", [U1]),
    ("multi-turn", [SYS, U1, A1, U2]),
    ("multi-turn-no-system", [U1, A1, U2, A2]),
]

TEMPLATES = {
    "qwen2.5": ("qwen2.5.jinja", QWEN),
    "qwen3": ("qwen3.jinja", QWEN),
    "llama3": ("llama3.jinja", {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}),
    "llama3.1": ("llama3.1.jinja", LLAMA3),
    "llama3.2": ("llama3.2.jinja", LLAMA3),
    "mistral-v3": ("mistral-v3.jinja", MISTRAL),
    "mistral-nemo": ("mistral-nemo.jinja", MISTRAL),
    "gemma2": ("gemma2.jinja", GEMMA2),
    "gemma3": ("gemma3.jinja", GEMMA3),
    "hermes3-tool_use": ("hermes3-tool_use.jinja", {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"}),
}

# Templates that render only with tools (the tool_use entry of a named list).
TOOLS_ONLY = {"hermes3-tool_use"}

# Extra cases per template: name, messages, add_generation_prompt, tools, kwargs.
EXTRA = {
    "qwen2.5": [
        ("tools", [UW], True, [WEATHER, TIME], {}),
        ("tool-call-and-result", [SYS, UW, CALL, RESULT, AW], False, [WEATHER], {}),
    ],
    "qwen3": [
        ("tools", [SYS, UW], True, [WEATHER, TIME], {}),
        ("tool-call-and-result", [UW, CALL, RESULT], True, [WEATHER], {}),
        ("enable-thinking-false", [U1], True, None, {"enable_thinking": False}),
        ("reasoning-history", [U1, {"role": "assistant", "content": "<think>\nEasy.\n</think>\n\nParis."}, U2,
                               {"role": "assistant", "content": "Berlin.", "reasoning_content": "Also easy."}], False, None, {}),
    ],
    "llama3.1": [
        ("tools-in-user-message", [SYS, UW], True, [WEATHER], {}),
        ("tools-in-system", [UW], True, [WEATHER], {"tools_in_user_message": False}),
        ("tool-call-and-result", [UW, CALL, RESULT], True, [WEATHER], {"tools_in_user_message": False}),
        ("builtin-tools", [SYS, U1], True, None, {"builtin_tools": ["brave_search", "wolfram_alpha"]}),
        ("date-string", [U1], True, None, {"date_string": "01 Jan 2025"}),
    ],
    "llama3.2": [
        ("tools-in-user-message", [SYS, UW], True, [WEATHER, TIME], {}),
        ("tool-call-and-result", [UW, CALL, RESULT], True, [WEATHER], {"tools_in_user_message": False}),
        ("date-string", [U1], True, None, {"date_string": "01 Jan 2025"}),
    ],
    "mistral-v3": [
        ("tools", [UW], True, [WEATHER], {}),
        ("tool-call-and-result", [UW, CALL, RESULT, AW, U1], True, [WEATHER], {}),
        ("not-alternating", [U1, U2], True, None, {}),
    ],
    "mistral-nemo": [
        ("tools", [SYS, UW], True, [WEATHER], {}),
    ],
    "gemma2": [
        ("system-refused", [SYS, U1], True, None, {}),
    ],
    "gemma3": [
        ("content-parts", [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                           {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " Describe it. "}]}], True, None, {}),
        ("not-alternating", [U1, U2], True, None, {}),
    ],
    "hermes3-tool_use": [
        ("tools", [UW], True, [WEATHER, TIME], {}),
        ("tool-call-and-result", [UW, CALL, RESULT], True, [WEATHER], {}),
    ],
}


def main():
    cases = []
    for tname, (path, tokens) in TEMPLATES.items():
        variants = []
        for cname, msgs in (BASIC if tname not in TOOLS_ONLY else []):
            for gen in (True, False):
                variants.append((f"{cname}/gen={str(gen).lower()}", msgs, gen, None, {}))
        variants += EXTRA.get(tname, [])
        source = open("templates/" + path, encoding="utf-8").read()
        for cname, msgs, gen, tools, kwargs in variants:
            case = {"name": f"{tname}/{cname}", "template": path, "special_tokens": tokens,
                    "messages": msgs, "add_generation_prompt": gen, "now": NOW}
            if tools is not None:
                case["tools"] = tools
            if kwargs:
                case["kwargs"] = kwargs
            try:
                case["want"] = render(source, case)
            except jinja2.exceptions.TemplateError as e:
                case["want_error"] = str(e)
            cases.append(case)
    doc = {"generator": "gen_golden.py", "jinja2": jinja2.__version__, "cases": cases}
    with open("golden.json", "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errs = sum("want_error" in c for c in cases)
    print(f"{len(cases)} cases ({errs} expected errors), Jinja2 {jinja2.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
