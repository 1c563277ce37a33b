"""Tool calling through thincuda serve (CPU backend, real SmolLM2): tools, tool_choice and
parallel_tool_calls through the official OpenAI client, forced calls constrained to each
function's schema, auto calls, parallel calls, a follow-up turn with the tool's result, the
streamed deltas, bad input answered with 400s; and the prompts rendered exactly as
transformers' apply_chat_template renders them with Qwen 2.5's (Hermes) and Meta's Llama 3.1
templates (data/tool_renderings.json, made by make_tool_renderings.py with transformers, and
rendered again here when transformers is installed)."""
import json
import os
import subprocess
import tempfile

import pytest

from test_server import NAME, ROOT, Server, check_error

openai = pytest.importorskip("openai")

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
TEMPLATES = {"qwen2.5": "qwen2.5-instruct.jinja", "llama3.1": "llama3.1-instruct.jinja",
             "mistral-v3": os.path.join("..", "..", "model", "data",
                                        "mistral-7b-instruct-v0.3.jinja")}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Get the local time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"], "additionalProperties": False}}}


def strict(tool):
    return {"type": "function", "function": {**tool["function"], "strict": True}}


def schema_of(name):
    return {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}[name]


def validate(args, schema):
    """The arguments parse as JSON and hold what the schema requires."""
    doc = json.loads(args)
    try:
        import jsonschema
        jsonschema.validate(doc, schema)
    except ImportError:
        assert set(schema["required"]) <= set(doc) <= set(schema["properties"]), doc
    return doc


@pytest.fixture(scope="module")
def srv():
    s = Server("--max-running", "4")
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="none", max_retries=0)


def rendered(srv, body):
    """The prompt the server makes of a chat body, as text (through /tokenize, /detokenize)."""
    status, r = srv.post("/tokenize", body)
    assert status == 200, r
    status, d = srv.post("/detokenize", {"tokens": r["tokens"]})
    assert status == 200, d
    return d["prompt"]


# ---------------------------------------------------------------- calls through the client


NAMED = dict(model=NAME, messages=[{"role": "user", "content": "What is the weather in Paris?"}],
             tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_weather"}},
             temperature=0, max_tokens=50)
_named = []


def named_call(client):
    """The reply to NAMED (made once for the tests that need it)."""
    if not _named:
        _named.append(client.chat.completions.create(**NAMED))
    return _named[0]


def test_forced_named_call(client):
    choice = named_call(client).choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and len(call.id) == 29
    assert call.function.name == "get_weather"
    validate(call.function.arguments, schema_of("get_weather"))


PARALLEL = dict(model=NAME, messages=[{"role": "user", "content": "Weather and time in Paris?"}],
                tools=[WEATHER, TIME], tool_choice="required", temperature=0, max_tokens=100)
_parallel = []


def parallel_calls(client):
    """The calls of PARALLEL, unstreamed (made once for the tests that need them)."""
    if not _parallel:
        _parallel.append(client.chat.completions.create(**PARALLEL))
    return _parallel[0]


def test_required_parallel_calls(client):
    """tool_choice required with parallel calls allowed: the model may make several, each
    valid; this prompt makes SmolLM2 call both functions. Without parallel calls, one."""
    r = parallel_calls(client)
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls"
    assert len(calls) >= 2, calls
    assert len({c.id for c in calls}) == len(calls)
    for c in calls:
        validate(c.function.arguments, schema_of(c.function.name))
    r = client.chat.completions.create(**{**PARALLEL, "parallel_tool_calls": False})
    assert len(r.choices[0].message.tool_calls) == 1


def shots():
    """A conversation in which the assistant answered five weather questions by calling the
    function (SmolLM2 then prefers <tool_call> to <tool_response> by 2 nats; with fewer
    examples it is a coin toss)."""
    out = []
    for i, city in enumerate(["London", "Berlin", "Madrid", "Oslo", "Lima"]):
        out += [{"role": "user", "content": f"What is the weather in {city}?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call_{i}", "type": "function",
                     "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}]},
                {"role": "tool", "tool_call_id": f"call_{i}", "content": "15 C"},
                {"role": "assistant", "content": f"It is 15 C in {city}."}]
    return out


def test_auto_call(client):
    """tool_choice auto (the default) with a strict function: SmolLM2 calls it after five
    examples, the grammar letting it write text or, once it opens a call, a valid call."""
    fn = {"name": "get_weather", "description": "Get the current weather in a city", "strict": True,
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"], "additionalProperties": False}}
    r = client.chat.completions.create(
        model=NAME, messages=shots() + [{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[{"type": "function", "function": fn}], parallel_tool_calls=False, temperature=0,
        max_tokens=32)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_auto_without_call(client):
    """With auto and no strict function nothing constrains the reply; text that makes no call
    is the content, whole."""
    r = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Say hello."}],
                                       tools=[WEATHER], temperature=0, max_tokens=12)
    choice = r.choices[0]
    assert not choice.message.tool_calls
    assert choice.message.content and choice.finish_reason in ("stop", "length")


def test_follow_up_with_result(srv, client):
    """The forced call and its result sent back: the next turn answers in text, and the prompt
    carries the call in a <tool_call> block and the result in a <tool_response> block."""
    msg = named_call(client).choices[0].message
    (call,) = msg.tool_calls
    messages = NAMED["messages"] + [msg.model_dump(exclude_none=True),
                                    {"role": "tool", "tool_call_id": call.id, "content": "22 C and sunny"}]
    second = client.chat.completions.create(model=NAME, messages=messages, tools=[WEATHER, TIME],
                                            temperature=0, max_tokens=30)
    assert second.choices[0].message.content
    assert not second.choices[0].message.tool_calls
    prompt = rendered(srv, {"messages": messages, "tools": [WEATHER, TIME]})
    args = json.loads(call.function.arguments)
    assert f'<tool_call>\n{{"name": "get_weather", "arguments": {json.dumps(args)}}}\n</tool_call>' in prompt
    assert prompt.endswith("<tool_response>\n22 C and sunny\n</tool_response><|im_end|>\n"
                           "<|im_start|>assistant\n")


def test_streamed_deltas(client):
    """Streamed, the calls come as OpenAI's deltas: a call's first delta has its index, id,
    type and name, later ones argument fragments; put together they are the unstreamed
    calls (greedy), and the last chunk says tool_calls."""
    whole = parallel_calls(client).choices[0].message.tool_calls
    calls, finish = {}, None
    for chunk in client.chat.completions.create(**PARALLEL, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        finish = chunk.choices[0].finish_reason or finish
        assert not delta.content
        for d in delta.tool_calls or []:
            if d.index not in calls:
                assert d.id.startswith("call_") and d.type == "function" and d.function.name
                calls[d.index] = {"name": d.function.name, "arguments": ""}
            else:
                assert d.id is None and d.function.name is None
            calls[d.index]["arguments"] += d.function.arguments or ""
    assert finish == "tool_calls"
    assert [calls[i] for i in sorted(calls)] == [
        {"name": c.function.name, "arguments": c.function.arguments} for c in whole]


def test_tool_choice_none(srv, client):
    """tool_choice none: no call, and the tools stay out of the prompt (as vLLM does)."""
    body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER],
            "tool_choice": "none"}
    assert "<tools>" not in rendered(srv, body)
    assert "<tools>" in rendered(srv, {**body, "tool_choice": "auto"})
    r = client.chat.completions.create(model=NAME, temperature=0, max_tokens=10, **body)
    assert not r.choices[0].message.tool_calls and r.choices[0].message.content


def test_forced_call_with_unsupported_schema(client):
    """A forced call whose schema uses a keyword the grammar lacks: its arguments are any JSON
    object, unless the function is strict (400 naming the keyword)."""
    tool = {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}}}}
    r = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Add 2 and 3."}],
                                       tools=[tool], tool_choice="required", temperature=0,
                                       max_tokens=40)
    assert isinstance(json.loads(r.choices[0].message.tool_calls[0].function.arguments), dict)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Add."}],
                                       tools=[strict(tool)], tool_choice="required", max_tokens=5)
    assert "minimum" in str(e.value) and e.value.body["param"] == "tools[0].function.parameters"


# ---------------------------------------------------------------- bad input


def call_msg(i="call_1"):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}


USER = {"role": "user", "content": "hi"}
BAD = [
    ("tools not an array", {"tools": {"type": "function"}}, "tools"),
    ("tool not a function", {"tools": [{"type": "retrieval"}]}, "tools[0]"),
    ("missing name", {"tools": [{"type": "function", "function": {"parameters": {}}}]},
     "tools[0].function.name"),
    ("bad name", {"tools": [{"type": "function", "function": {"name": "a b"}}]},
     "tools[0].function.name"),
    ("duplicate names", {"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
    ("parameters not an object",
     {"tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]},
     "tools[0].function.parameters"),
    ("strict not a boolean",
     {"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]},
     "tools[0].function.strict"),
    ("too many tools", {"tools": [{"type": "function", "function": {"name": f"f{i}"}}
                                  for i in range(129)]}, "tools"),
    ("unknown function", {"tools": [WEATHER], "tool_choice": {"type": "function",
                                                              "function": {"name": "nope"}}},
     "tool_choice"),
    ("bad tool_choice", {"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ("tool_choice without tools", {"tool_choice": "required"}, "tool_choice"),
    ("parallel_tool_calls not a boolean", {"tools": [WEATHER], "parallel_tool_calls": 1},
     "parallel_tool_calls"),
    ("tool message without id", {"messages": [USER, call_msg(), {"role": "tool", "content": "1"}]},
     "messages[2].tool_call_id"),
    ("tool message answering no call",
     {"messages": [USER, call_msg(), {"role": "tool", "tool_call_id": "call_9", "content": "1"}]},
     "messages[2].tool_call_id"),
    ("tool message without a call", {"messages": [USER, {"role": "tool", "tool_call_id": "x",
                                                         "content": "1"}]},
     "messages[1].tool_call_id"),
    ("arguments not JSON", {"messages": [USER, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{"}}]}]},
     "messages[1].tool_calls[0]"),
    ("tool_calls not an array", {"messages": [USER, {"role": "assistant", "tool_calls": {}}]},
     "messages[1].tool_calls"),
    ("user with tool_calls", {"messages": [{**USER, "tool_calls": []}]}, "messages[0].tool_calls"),
    ("response_format with tools", {"tools": [WEATHER], "response_format": {"type": "json_object"}},
     "response_format"),
]


@pytest.mark.parametrize("name,extra,param", BAD, ids=[b[0] for b in BAD])
def test_bad_input(srv, name, extra, param):
    body = {"model": NAME, "messages": [USER], "max_tokens": 4, **extra}
    status, r = srv.post("/v1/chat/completions", body)
    check_error(status, r, 400, param=param)


def test_template_without_tools():
    """A template without tool calling (Zephyr's) refuses tools and tool messages by name."""
    s = Server("--template", "zephyr")
    try:
        for extra in ({"tools": [WEATHER]}, {"messages": [USER, call_msg()]}):
            status, r = s.post("/v1/chat/completions",
                               {"model": NAME, "messages": [USER], "max_tokens": 4, **extra})
            check_error(status, r, 400)
            assert "Zephyr chat template has no tool calling" in r["error"]["message"], r
        # tool_choice none leaves the tools out, so nothing needs rendering.
        status, r = s.post("/v1/chat/completions", {"model": NAME, "messages": [USER],
                                                    "max_tokens": 2, "tools": [WEATHER],
                                                    "tool_choice": "none"})
        assert status == 200, r
    finally:
        assert s.stop() == 0, "".join(s.log)


# ---------------------------------------------------------------- renderings


def hf_model():
    r = subprocess.run([os.path.join(ROOT, "tools", "fetch-model"), "--hf"], capture_output=True,
                       text=True)
    path = r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else ""
    return path if os.path.isdir(path) else None


@pytest.fixture(scope="module")
def renderings():
    with open(os.path.join(DATA, "tool_renderings.json")) as f:
        return json.load(f)["cases"]


@pytest.fixture(scope="module")
def family_srv():
    """family -> SmolLM2 (Hugging Face form) with that family's own template file as its chat
    template, so that the server recognises the template as it would the model's; each
    server started when first asked for."""
    hf = hf_model()
    if not hf:
        pytest.skip("SmolLM2's Hugging Face form is not available (tools/fetch-model --hf)")
    servers, dirs = {}, []

    def get(family):
        if family not in servers:
            d = tempfile.TemporaryDirectory()
            dirs.append(d)
            for f in os.listdir(hf):
                if f != "chat_template.jinja":
                    os.symlink(os.path.join(hf, f), os.path.join(d.name, f))
            with open(os.path.join(DATA, TEMPLATES[family])) as src, \
                    open(os.path.join(d.name, "chat_template.jinja"), "w") as dst:
                dst.write(src.read())
            servers[family] = Server("--model", d.name)
        return servers[family]
    yield get
    for s in servers.values():
        assert s.stop() == 0, "".join(s.log)
    for d in dirs:
        d.cleanup()


def test_forced_call_in_llama_format(family_srv):
    """Llama 3.1's call format end to end (ChatML's is test_follow_up_with_result's): a forced
    call is written in the template's own format (the grammar's), parsed back into
    tool_calls, and rendered into the next prompt as the template writes calls."""
    s = family_srv("llama3.1")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key="none", max_retries=0)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model=NAME, messages=messages, tools=[WEATHER],
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                       temperature=0, max_tokens=50)
    assert r.choices[0].finish_reason == "tool_calls"
    (call,) = r.choices[0].message.tool_calls
    args = validate(call.function.arguments, schema_of("get_weather"))
    messages += [r.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "22 C"}]
    prompt = rendered(s, {"messages": messages, "tools": [WEATHER]})
    assert (f'<|start_header_id|>assistant<|end_header_id|>\n\n{{"name": "get_weather", '
            f'"parameters": {json.dumps(args)}}}<|eot_id|><|start_header_id|>ipython'
            f'<|end_header_id|>\n\n"22 C"<|eot_id|>') in prompt


def test_calls_in_mistral_format(family_srv):
    """Mistral v3's calls end to end: forced calls are written as the template's JSON array
    (the grammar's; [TOOL_CALLS] is a control token the text leaves out), parsed back into
    tool_calls with 9-character ids, and rendered into the next prompt as the template writes
    calls and results, ids included; required with parallel calls makes valid calls too."""
    s = family_srv("mistral-v3")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key="none", max_retries=0)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model=NAME, messages=messages, tools=[WEATHER, TIME],
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                       temperature=0, max_tokens=60)
    assert r.choices[0].finish_reason == "tool_calls", r
    assert r.choices[0].message.content is None
    (call,) = r.choices[0].message.tool_calls
    assert len(call.id) == 9 and call.id.isalnum(), call.id
    assert call.function.name == "get_weather"
    args = validate(call.function.arguments, schema_of("get_weather"))
    messages += [r.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "22 C"}]
    prompt = rendered(s, {"messages": messages, "tools": [WEATHER]})
    assert (f'[TOOL_CALLS] [{{"name": "get_weather", "arguments": {json.dumps(args)}, '
            f'"id": "{call.id}"}}]</s>[TOOL_RESULTS] {{"content": 22 C, "call_id": '
            f'"{call.id}"}}[/TOOL_RESULTS]') in prompt, prompt
    r = client.chat.completions.create(model=NAME, tools=[WEATHER, TIME], tool_choice="required",
                                       messages=[{"role": "user", "content": "Weather and time in Paris?"}],
                                       temperature=0, max_tokens=120)
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and calls, r
    assert len({c.id for c in calls}) == len(calls)
    for c in calls:
        assert len(c.id) == 9 and c.id.isalnum(), c.id
        validate(c.function.arguments, schema_of(c.function.name))


@pytest.mark.parametrize("family", ["qwen2.5", "llama3.1"])
def test_renderings_match_transformers(family_srv, renderings, family):
    s = family_srv(family)
    cases = [c for c in renderings if c["family"] == family]
    assert len(cases) >= 5
    live = None
    try:
        import make_tool_renderings
        import transformers  # noqa: F401
        live = make_tool_renderings.render
    except ImportError:
        pass  # the committed renderings, made by transformers, are the reference
    for c in cases:
        body = {"messages": c["messages"]}
        if c["tools"]:
            body["tools"] = c["tools"]
        got = rendered(s, body)
        assert got == c["expected"], (c["name"], got)
        if live:
            assert live(family, c["messages"], c["tools"]) == c["expected"], c["name"]
    # A Llama 3.1 message may make one call only, as its template says.
    if family == "llama3.1":
        status, r = s.post("/tokenize", {"messages": [USER, {
            "role": "assistant", "tool_calls": call_msg("a")["tool_calls"] + call_msg("b")["tool_calls"]}]})
        check_error(status, r, 400)
        assert "one tool call per assistant message" in r["error"]["message"]
