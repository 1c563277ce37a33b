"""Write tests/server/data/tool_renderings.json: conversations with tools, tool calls and tool
results, and how transformers' apply_chat_template renders each with Qwen 2.5's template
(the Hermes format that thincuda uses for ChatML models) and Meta's Llama 3.1 template (both
in tests/server/data/, copied from the models' tokenizer configurations). test_tool_calls.py
checks that thincuda serve renders every case the same; where transformers is installed it
renders them again itself, so that this file cannot go stale. Run from the repository root:

    python3 -m pip install transformers && python3 tests/server/make_tool_renderings.py

Tool-call arguments are given to transformers as dicts (its documented form; thincuda parses
the OpenAI JSON strings into the same)."""
import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
TEMPLATES = {"qwen2.5": "qwen2.5-instruct.jinja", "llama3.1": "llama3.1-instruct.jinja"}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather for a city. \"Quoted\", \\ and \t, ünïcödé €",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city's name"},
        "unit": {"enum": ["celsius", "fahrenheit"], "default": "celsius"},
        "days": {"type": "integer", "minimum": 1, "maximum": 16},
        "threshold": {"type": "number", "minimum": 0.1, "maximum": 1e20, "multipleOf": 1e-07},
        "scale": {"type": "number", "default": 123456.789, "examples": [
            2.0, -0.0001, 0.00001234, 1e16, 9999999999999998.0, 1.5e300, -2.5e-300, 0.1, 100]},
        "tags": {"type": "array", "items": {"type": "string"}, "default": []},
        "extra": {"type": "object", "properties": {}, "default": None},
        "flag": {"type": "boolean", "default": False}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Local time",
                                         "parameters": {"type": "object", "properties": {
                                             "city": {"type": "string"}}, "required": ["city"]}}}
BARE = {"type": "function", "function": {"name": "ping"}}


def call(i, name, args):
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


CASES = [
    ("tools, system", [{"role": "system", "content": "  Be brief.\n"}, {"role": "user", "content": "Weather in Paris?"}],
     [WEATHER, TIME]),
    ("tools, default system", [{"role": "user", "content": " Weather in Paris? "}], [WEATHER]),
    ("tool without parameters", [{"role": "user", "content": "Ping"}], [BARE]),
    ("one call and its result", [
        {"role": "system", "content": "You help."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call(1, "get_weather", {"city": "Paris", "threshold": 0.5, "days": 3})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, ünï <|im_end|><|eot_id|>"},
        {"role": "assistant", "content": "It is 18 C."},
        {"role": "user", "content": "Thanks"}], [WEATHER]),
    ("history without tools", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call(1, "get_weather", {"city": "Paris", "tags": ["a", "b"], "extra": {}})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18}"}], None),
]
# Qwen 2.5 (the Hermes format) also takes several calls in one message and their results in
# one user turn; Llama 3.1's template refuses more than one call per message.
CHATML_ONLY = [
    ("parallel calls and results", [
        {"role": "user", "content": "Weather and time in Paris?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            call(1, "get_weather", {"city": "Paris"}), call(2, "get_time", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
        {"role": "user", "content": "And now?"}], [WEATHER, TIME]),
]


def render(family, messages, tools):
    """transformers' rendering of one case with a template family's template."""
    from transformers import PreTrainedTokenizerFast
    hf = subprocess.run([os.path.join(HERE, "..", "..", "tools", "fetch-model"), "--hf"],
                        capture_output=True, text=True, check=True).stdout.split()[-1]
    tok = PreTrainedTokenizerFast.from_pretrained(hf)
    with open(os.path.join(DATA, TEMPLATES[family])) as f:
        template = f.read()
    msgs = json.loads(json.dumps(messages))
    for m in msgs:
        for c in m.get("tool_calls") or []:
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return tok.apply_chat_template(msgs, tools=tools, chat_template=template, tokenize=False,
                                   add_generation_prompt=True, bos_token="<|begin_of_text|>")


def cases():
    out = []
    for family in TEMPLATES:
        for name, messages, tools in CASES + (CHATML_ONLY if family == "qwen2.5" else []):
            out.append({"family": family, "name": name, "messages": messages, "tools": tools})
    return out


if __name__ == "__main__":
    import transformers
    result = {"made_by": f"tests/server/make_tool_renderings.py with transformers {transformers.__version__}",
              "cases": []}
    for c in cases():
        c["expected"] = render(c["family"], c["messages"], c["tools"])
        result["cases"].append(c)
    with open(os.path.join(DATA, "tool_renderings.json"), "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(result['cases'])} renderings written")
