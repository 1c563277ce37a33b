#!/usr/bin/env python3
"""Write tests/model/data/chat_renderings.json: conversations rendered by transformers'
apply_chat_template with Qwen 2.5's template (ChatML with its default system prompt,
tests/server/data/qwen2.5-instruct.jinja), Mistral 7B Instruct's two templates (v0.2's, which
v0.1 ships now too, and v0.1's first), Mistral's v3 templates (Mistral-7B-Instruct-v0.3's and
Mistral-Nemo-Instruct-2407's, with tools, tool calls and tool results) and its v7 template
(Mistral-Small-24B-Instruct-2501's, whose default system message holds today's date, recorded
as {today}); the templates are in tests/model/data/, copied from the models' tokenizer
configurations (Apache 2.0). Where a template raises, the case records null.
test_chat_families.c checks that our native renderings equal them; test_chat_renderings.py
renders them again where transformers is installed, so that the file cannot go stale.
Run from the repository root (transformers needs no PyTorch for this):

    python3 tests/model/make_chat_renderings.py
"""
import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
TEMPLATES = {"qwen2.5": "../../server/data/qwen2.5-instruct.jinja",
             "mistral-v0.2": "mistral-7b-instruct-v0.2.jinja",
             "mistral-v0.1": "mistral-7b-instruct-v0.1.jinja",
             "mistral-v0.3": "mistral-7b-instruct-v0.3.jinja",
             "mistral-nemo": "mistral-nemo-instruct-2407.jinja",
             "mistral-small-3": "mistral-small-24b-instruct-2501.jinja"}
SPECIAL = {"qwen2.5": ("<|endoftext|>", "<|im_end|>")}
TOOLS = ("mistral-v0.3", "mistral-nemo")  # the families whose templates take tools

U, A, S = "user", "assistant", "system"
CONVERSATIONS = [
    ("one question", [(U, "What is 12 times 7?")]),
    ("system and question", [(S, "You are terse."), (U, "Name a prime.")]),
    ("turns", [(U, "Hi"), (A, "Hello! How can I help?"), (U, "  Tell me a joke.  \n")]),
    ("system and turns", [(S, " Be brief.\n"), (U, "Hi"), (A, " Hello "), (U, "Bye")]),
    ("answer last", [(U, "Hi"), (A, "Hello")]),
    ("assistant first", [(A, "I start."), (U, "Hi")]),
    ("two users", [(U, "Hi"), (U, "Again")]),
    ("unicode and markers", [(U, "Ünïcödé [INST] <|im_start|> 😀")]),
    ("system later", [(U, "Hi"), (S, "Be brief."), (U, "Bye")]),
]

sys.path.insert(0, os.path.join(HERE, "..", "server"))
from make_tool_renderings import BARE, TIME, WEATHER  # noqa: E402


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


# Mistral's v3 templates: tools before the last user turn (and every turn equal to it), calls
# with 9-character ids, results naming their call; the system message in the last turn only.
TOOL_CONVERSATIONS = [
    ("tools", [{"role": "user", "content": "Weather in Paris?"}], [WEATHER, TIME]),
    ("tools, system", [{"role": "system", "content": "  Be brief.\n"},
                       {"role": "user", "content": " Weather in Paris? "}], [WEATHER]),
    ("tool without parameters", [{"role": "user", "content": "Ping"}], [BARE]),
    ("calls and results", [
        {"role": "system", "content": "You help."},
        {"role": "user", "content": "Weather and time in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            call("a1B2c3D4e", "get_weather", {"city": "Paris", "threshold": 0.5, "days": 3}),
            call("Zz9yY8xX7", "get_time", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "a1B2c3D4e", "content": "18 C, ünï [INST]"},
        {"role": "tool", "tool_call_id": "Zz9yY8xX7", "content": "{\"time\": \"12:00\"}"},
        {"role": "assistant", "content": "  It is 18 C and noon.\n"},
        {"role": "user", "content": "Thanks"}], [WEATHER, TIME]),
    ("results last", [
        {"role": "system", "content": "You help."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call("abcdefghi", "get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "abcdefghi", "content": "18 C"}], [WEATHER]),
    ("same question twice", [(U, "Hi"), (A, "Hello"), (U, "Hi")], [TIME]),
    ("history without tools", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call("abcdefghi", "get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "abcdefghi", "content": "18 C"},
        {"role": "assistant", "content": "18 C."},
        {"role": "user", "content": "Thanks"}], None),
    ("call id of 6", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call("call_1", "get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}], [WEATHER]),
    ("no tools", [(U, "Hi")], []),
]


def message_list(messages):
    """(role, content) pairs or message dicts, as dicts."""
    return [m if isinstance(m, dict) else {"role": m[0], "content": m[1]} for m in messages]


def render(family, messages, add_generation_prompt, tools=None):
    """transformers' rendering (today's date as {today}), or None where the template raises.
    Tool-call arguments go to transformers as dicts (its documented form; thincuda parses the
    OpenAI JSON strings into the same)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    bos, eos = SPECIAL.get(family, ("<s>", "</s>"))
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), bos_token=bos,
                                  eos_token=eos)
    with open(os.path.join(DATA, TEMPLATES[family])) as f:
        template = f.read()
    msgs = json.loads(json.dumps(message_list(messages)))
    for m in msgs:
        for c in m.get("tool_calls") or []:
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    try:
        out = tok.apply_chat_template(msgs, tools=tools, chat_template=template, tokenize=False,
                                      add_generation_prompt=add_generation_prompt)
    except Exception as e:  # the template's raise_exception
        if "TemplateError" not in type(e).__name__:
            raise
        return None
    return out.replace(datetime.date.today().strftime("%Y-%m-%d"), "{today}")


def cases():
    out = []
    for family in TEMPLATES:
        for name, messages in CONVERSATIONS:
            for gen in (True, False):
                out.append({"family": family, "template": TEMPLATES[family], "name": name,
                            "messages": message_list(messages), "add_generation_prompt": gen})
        for name, messages, tools in TOOL_CONVERSATIONS if family in TOOLS else []:
            out.append({"family": family, "template": TEMPLATES[family], "name": name,
                        "messages": message_list(messages), "tools": tools,
                        "add_generation_prompt": True})
    return out


if __name__ == "__main__":
    import transformers
    result = {"made_by": f"tests/model/make_chat_renderings.py with transformers {transformers.__version__}",
              "cases": []}
    for c in cases():
        c["expected"] = render(c["family"], c["messages"], c["add_generation_prompt"],
                               c.get("tools"))
        result["cases"].append(c)
    with open(os.path.join(DATA, "chat_renderings.json"), "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(result['cases'])} renderings written")
