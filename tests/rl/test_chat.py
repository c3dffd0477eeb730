import json

from sinkflex_lib.rl import chat


def test_split_and_render_observation():
    obs = "tool: {\"a\": \"x y\", \"b\": [1, 2]}\nuser: hello\nthere"
    assert chat.split_observation(obs) == [("tool", '{"a": "x y", "b": [1, 2]}'), ("user", "hello\nthere")]
    text = chat.render_observation(obs)
    assert text == "<|tool|>{a:x y,b:[1,2]}<|end|><|user|>hello\nthere<|end|><|assistant|>"
    assert chat.compact_json("Error: no such order") == "Error: no such order"


def test_canonical_action_is_functional():
    a = json.dumps({"name": "get_order_details", "arguments": {"order_id": "#W1"}})
    assert chat.canonical_action(a) == "get_order_details(order_id='#W1')"
    assert chat.canonical_action("Hello there") == "Hello there"


def test_project_tokenizer_roundtrip_and_specials():
    tok = chat.build_tokenizer()
    assert 1000 <= len(tok) <= chat.VOCAB_SIZE
    for s in chat.SPECIAL_TOKENS:
        ids = tok(s, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, s
    text = "<|assistant|>find_user_id_by_email(email='zz.unseen99@example.com')<|end|> ünïcode"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    # an id has the same tokens wherever it appears (copying is one mapping)
    oid = tok.tokenize("#W2316820")
    a = tok.tokenize("<|tool|>{orders:[#W2316820]}")
    b = tok.tokenize("get_order_details(order_id='#W2316820')")
    c = tok.tokenize("My order is #W2316820.")
    for toks in (a, b, c):
        assert any(toks[i:i + len(oid)] == oid for i in range(len(toks))), toks
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True) == "<|user|>hi<|end|><|assistant|>"


def test_tokenizer_is_rebuilt_bit_for_bit():
    texts = chat.tokenizer_corpus()
    stored = chat.build_tokenizer()
    fresh = chat.train_tokenizer(texts)
    assert fresh.backend_tokenizer.to_str() == stored.backend_tokenizer.to_str()


def test_stored_tokenizer_ships_tool_and_response_templates():
    from sinkflex_lib.rl.tool_template import TOOL_CHAT_TEMPLATE, response_template

    tok = chat.build_tokenizer()
    assert tok.chat_template == TOOL_CHAT_TEMPLATE
    assert tok.response_template == response_template()
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    rendered = tok.apply_chat_template(msgs, tokenize=False)
    assert rendered == "".join(chat.render_message(m["role"], m["content"]) for m in msgs)
