"""Structured output through thincuda serve (CPU backend, real SmolLM2): response_format
json_schema and json_object are enforced by constrained decoding, so that every answer parses
as JSON and validates against its schema (PyPI's jsonschema), greedy and sampled, streamed and
not; unsupported keywords are 400s naming them; the official client's parse() works."""
import json
import time
import typing

import pytest

from test_server import NAME, Server, check_error, stream

jsonschema = pytest.importorskip("jsonschema")

S = {"type": "string"}
SB = {"type": "string", "maxLength": 16}
I = {"type": "integer"}
N = {"type": "number"}
B = {"type": "boolean"}


def obj(props, required=None, **kw):
    return {"type": "object", "properties": props,
            "required": list(props) if required is None else required,
            "additionalProperties": False, **kw}


SCHEMAS = [
    ("person", obj({"name": S, "age": I})),
    ("city", obj({"city": {"enum": ["Paris", "London", "Rome"]}})),
    ("flag", obj({"ok": B})),
    ("score", obj({"score": N})),
    ("nothing", obj({"value": {"type": "null"}})),
    ("const", obj({"kind": {"const": "answer"}, "n": I})),
    ("optional", obj({"name": S, "nickname": S, "age": I}, required=["name"])),
    ("all optional", obj({"a": I, "b": B}, required=[])),
    ("nested", obj({"person": obj({"name": S, "age": I}), "valid": B})),
    ("deep", obj({"a": obj({"b": obj({"c": obj({"d": I})})})})),
    ("list of ints", obj({"numbers": {"type": "array", "items": I, "maxItems": 6}})),
    ("bounded list", obj({"tags": {"type": "array", "items": SB, "minItems": 1, "maxItems": 3}})),
    ("bounded strings", obj({"code": {"type": "string", "minLength": 2, "maxLength": 4},
                             "word": SB})),
    ("exact list", obj({"pair": {"type": "array", "items": I, "minItems": 2, "maxItems": 2}})),
    ("list of objects", obj({"people": {"type": "array", "maxItems": 3,
                                        "items": obj({"name": S, "age": I})}})),
    ("enum list", obj({"colours": {"type": "array", "maxItems": 4,
                                   "items": {"enum": ["red", "green", "blue"]}}})),
    ("anyOf", obj({"value": {"anyOf": [I, S]}})),
    ("anyOf objects", obj({"shape": {"anyOf": [obj({"radius": N}), obj({"w": N, "h": N})]}})),
    ("nullable", obj({"name": {"type": ["string", "null"]}})),
    ("type list", obj({"x": {"type": ["integer", "boolean"]}})),
    ("mixed enum", obj({"v": {"enum": [1, "two", True, None]}})),
    ("date", obj({"day": {"type": "string", "format": "date"}})),
    ("date-time", obj({"at": {"type": "string", "format": "date-time"}})),
    ("refs", {"$defs": {"P": obj({"name": S})}, **obj({"a": {"$ref": "#/$defs/P"},
                                                      "b": {"$ref": "#/$defs/P"}})}),
    ("recursive", {"$defs": {"Node": obj({"name": SB, "next": {"$ref": "#/$defs/Node"}},
                                         required=["name"])},
                   "$ref": "#/$defs/Node"}),
    ("top array", {"type": "array", "items": I, "maxItems": 5}),
    ("top string", S),
    ("top enum", {"enum": ["yes", "no"]}),
    ("top integer", I),
    ("free object", {"type": "object"}),
    ("any", {}),
    ("annotated", {"title": "T", "description": "d", **obj({"q": {**SB, "title": "Q",
                                                               "default": "x"}})}),
    ("many fields", obj({f"f{i}": [S, I, B][i % 3] for i in range(8)})),
    ("matrix", obj({"m": {"type": "array", "maxItems": 2,
                          "items": {"type": "array", "items": I, "maxItems": 2}}})),
]

# What a small model needs to be told to end a recursive document.
HINTS = {"recursive": 'Write a chain of two names, like {"name": "Ann", "next": {"name": "Bob"}}.'}

PROMPT = [{"role": "system", "content": "You answer with JSON only."},
          {"role": "user", "content": "Describe a person: name, age, city, anything asked."}]


@pytest.fixture(scope="module")
def srv():
    s = Server("--max-running", "8")
    yield s
    assert s.stop() == 0, "".join(s.log)


def fmt(schema):
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema,
                                                   "strict": True}}


def check(text, schema, finish):
    assert finish == "stop", (finish, text)
    doc = json.loads(text)
    jsonschema.validate(doc, schema)
    return doc


@pytest.mark.parametrize("name,schema", SCHEMAS, ids=[n for n, _ in SCHEMAS])
def test_schema_enforced(srv, name, schema):
    assert len(SCHEMAS) >= 30
    # As with any server, the model is told what to write; the grammar makes sure it does.
    messages = [{"role": "system", "content": "You answer with short JSON matching this JSON "
                 "schema: " + json.dumps(schema)}, {"role": "user", "content": HINTS.get(name, PROMPT[1]["content"])}]
    body = {"model": NAME, "messages": messages, "max_tokens": 300,
            "response_format": fmt(schema)}
    t0 = time.time()
    status, r = srv.post("/v1/chat/completions", {**body, "temperature": 0})
    assert status == 200, r
    check(r["choices"][0]["message"]["content"], schema, r["choices"][0]["finish_reason"])
    # Sampled, streamed.
    events = stream(srv, "/v1/chat/completions", {**body, "temperature": 0.9, "seed": 3,
                                                  "stream": True})
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in events[:-1] if c["choices"])
    check(text, schema, events[-2]["choices"][0]["finish_reason"])
    print(f"\n{name}: {r['choices'][0]['message']['content'][:80]} ({time.time() - t0:.2f} s)")


def test_json_object(srv):
    for temperature in (0, 1.0):
        status, r = srv.post("/v1/chat/completions", {
            "messages": PROMPT, "max_tokens": 300, "temperature": temperature, "seed": 1,
            "response_format": {"type": "json_object"}})
        assert status == 200, r
        doc = json.loads(r["choices"][0]["message"]["content"])
        assert isinstance(doc, dict)


def test_same_schema_shares_its_grammar(srv):
    """A repeated schema finds its compiled grammar (and the masks it cached); another order
    of the same properties is another grammar, and both still hold their documents."""
    a = obj({"first": S, "n": I, "ok": B})
    b = obj({"n": I, "first": S, "ok": B})
    body = {"messages": PROMPT, "max_tokens": 60, "temperature": 0}
    m0 = srv.metrics()
    texts = []
    for schema in (a, a, b, a):
        status, r = srv.post("/v1/chat/completions", {**body, "response_format": fmt(schema)})
        assert status == 200, r
        text = r["choices"][0]["message"]["content"]
        check(text, schema, r["choices"][0]["finish_reason"])
        texts.append(text)
    m1 = srv.metrics()
    assert m1["thincuda_grammar_cache_hits_total"] - m0.get("thincuda_grammar_cache_hits_total", 0) == 2
    assert m1["thincuda_grammar_cache_misses_total"] - m0.get("thincuda_grammar_cache_misses_total", 0) == 2
    assert texts[0] == texts[1] == texts[3], texts
    assert list(json.loads(texts[2])) == ["n", "first", "ok"], texts[2]


@pytest.mark.parametrize("schema,keyword", [
    ({"type": "string", "pattern": "^a+$"}, "pattern"),
    (obj({"n": {"type": "integer", "minimum": 3}}), "minimum"),
    (obj({"n": {"type": "number", "multipleOf": 3}}), "multipleOf"),
    ({"oneOf": [I, S]}, "oneOf"),
    ({"allOf": [I]}, "allOf"),
    ({"not": I}, "not"),
    (obj({"x": I}, patternProperties={"a": I}), "patternProperties"),
    ({"type": "array", "items": I, "uniqueItems": True}, "uniqueItems"),
])
def test_unsupported_keyword(srv, schema, keyword):
    status, r = srv.post("/v1/chat/completions", {"messages": PROMPT, "max_tokens": 5,
                                                  "response_format": fmt(schema)})
    check_error(status, r, 400, "response_format.json_schema.schema")
    assert f"'{keyword}'" in r["error"]["message"], r


@pytest.mark.parametrize("schema", [
    {"$ref": "#/$defs/Missing"},
    obj({"a": I}, required=["b"]),
    {"type": "array", "minItems": 3, "maxItems": 1},
    {"type": "wizard"},
])
def test_malformed_schema(srv, schema):
    check_error(*srv.post("/v1/chat/completions", {"messages": PROMPT, "max_tokens": 5,
                                                   "response_format": fmt(schema)}),
                400, "response_format.json_schema.schema")


def test_openai_parse(srv):
    openai = pytest.importorskip("openai")
    pydantic = pytest.importorskip("pydantic")

    Short = typing.Annotated[str, pydantic.StringConstraints(max_length=20)]

    class Address(pydantic.BaseModel):
        city: Short
        country: Short

    class Person(pydantic.BaseModel):
        name: Short
        age: int
        address: Address
        hobbies: list[Short] = pydantic.Field(max_length=3)

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="unused",
                           max_retries=0)
    r = client.chat.completions.parse(model=NAME, messages=PROMPT, response_format=Person,
                                      max_tokens=300, temperature=0)
    p = r.choices[0].message.parsed
    assert isinstance(p, Person) and isinstance(p.address, Address), r
    print(f"\nparse(): {p!r}")
