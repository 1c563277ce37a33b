#!/usr/bin/env python3
"""Write tests/model/data/chat_renderings.json: conversations rendered by transformers'
apply_chat_template with Qwen 2.5's template (ChatML with its default system prompt,
tests/server/data/qwen2.5-instruct.jinja) and Mistral 7B Instruct's two templates (v0.2's, which
v0.1 ships now too, and v0.1's first; tests/model/data/), or the error the template raises.
test_chat_families.c checks that our native renderings equal them; test_chat_renderings.py
renders them again where transformers is installed, so that the file cannot go stale.
Run from the repository root (transformers needs no PyTorch for this):

    python3 tests/model/make_chat_renderings.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
TEMPLATES = {"qwen2.5": "../../server/data/qwen2.5-instruct.jinja",
             "mistral-v0.2": "mistral-7b-instruct-v0.2.jinja",
             "mistral-v0.1": "mistral-7b-instruct-v0.1.jinja"}
SPECIAL = {"qwen2.5": ("<|endoftext|>", "<|im_end|>"), "mistral-v0.2": ("<s>", "</s>"),
           "mistral-v0.1": ("<s>", "</s>")}

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
]


def render(family, messages, add_generation_prompt):
    """transformers' rendering, or None where the template raises."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    bos, eos = SPECIAL[family]
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), bos_token=bos,
                                  eos_token=eos)
    with open(os.path.join(DATA, TEMPLATES[family])) as f:
        template = f.read()
    msgs = [{"role": r, "content": c} for r, c in messages]
    try:
        return tok.apply_chat_template(msgs, chat_template=template, tokenize=False,
                                       add_generation_prompt=add_generation_prompt)
    except Exception as e:  # the template's raise_exception
        if "TemplateError" not in type(e).__name__:
            raise
        return None


def cases():
    out = []
    for family in TEMPLATES:
        for name, messages in CONVERSATIONS:
            for gen in (True, False):
                out.append({"family": family, "template": TEMPLATES[family], "name": name,
                            "messages": [{"role": r, "content": c} for r, c in messages],
                            "add_generation_prompt": gen})
    return out


if __name__ == "__main__":
    import transformers
    result = {"made_by": f"tests/model/make_chat_renderings.py with transformers {transformers.__version__}",
              "cases": []}
    for c in cases():
        c["expected"] = render(c["family"], [(m["role"], m["content"]) for m in c["messages"]],
                               c["add_generation_prompt"])
        result["cases"].append(c)
    with open(os.path.join(DATA, "chat_renderings.json"), "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(result['cases'])} renderings written")
