"""Tests for specdec_helpers.prompts: the shipped sets, the loader's error messages, select()
and the synthetic long-document prompt. Pure Python and fast: no model, no engine."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from specdec_helpers.measure.prompts import (
    DEFAULT_CLASS,
    DEFAULT_MAX_TOKENS,
    PROMPTS_DIR,
    Prompt,
    PromptFileError,
    load_prompt_sets,
    load_prompts,
    long_document_for_tokens,
    long_document_prompt,
    select,
)

GOOD = {
    "id": "x01",
    "class": "mine",
    "subcategory": "misc",
    "messages": [{"role": "user", "content": "Say hi."}],
    "max_tokens": 32,
}


def good(**changes) -> str:
    record = {**GOOD, **changes}
    return json.dumps(record)


def write(tmp_path: Path, lines: list[str], name: str = "p.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------------------- shipped sets


@pytest.fixture(scope="module")
def shipped() -> list[Prompt]:
    return load_prompt_sets()


def test_shipped_sets_load_with_enough_prompts(shipped):
    per_class = Counter(p.cls for p in shipped)
    assert per_class["structured"] >= 24
    assert per_class["creative"] >= 24
    assert set(per_class) == {"structured", "creative"}


def test_shipped_ids_unique(shipped):
    ids = [p.id for p in shipped]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("cls, subcategories", [
    ("structured", {"json_schema", "json_extraction", "sql", "code"}),
    ("creative", {"poem", "story", "brainstorm", "slogan"}),
])
def test_shipped_subcategories_balanced(shipped, cls, subcategories):
    counts = Counter(p.subcategory for p in shipped if p.cls == cls)
    assert set(counts) == subcategories
    assert min(counts.values()) >= 6


def test_shipped_budgets_are_short_answer_sized(shipped):
    # Answered by a 135M model on a CPU: budgets stay small so a full run stays short.
    assert all(96 <= p.max_tokens <= 192 for p in shipped)


def test_load_single_set_by_name():
    prompts = load_prompt_sets("structured")
    assert prompts and all(p.cls == "structured" for p in prompts)


def test_unknown_set_name_is_clear():
    with pytest.raises(FileNotFoundError, match="no prompt set named 'nope'.*available"):
        load_prompt_sets(["nope"])


def test_shipped_dir_is_repo_data_prompts():
    assert PROMPTS_DIR == Path(__file__).resolve().parents[2] / "data" / "prompts"


# ---------------------------------------------------------------------------- loading own files


def test_load_own_file_with_blank_lines_and_list_of_paths(tmp_path):
    a = write(tmp_path, ["", good(id="a1"), "   ", good(id="a2"), ""], "a.jsonl")
    b = write(tmp_path, [good(id="b1", messages=[
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Again?"},
    ])], "b.jsonl")
    prompts = load_prompts([a, str(b)])
    assert [p.id for p in prompts] == ["a1", "a2", "b1"]
    assert prompts[0].cls == "mine"
    assert len(prompts[2].messages) == 4


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="prompt file not found: .*nothere.jsonl"):
        load_prompts(tmp_path / "nothere.jsonl")


# Each case: lines of the file, the 1-based line expected in the error, and a regex the
# message must contain. Line 1 is always a valid prompt, so the line number is checked.
MALFORMED = {
    "invalid-json": ([good(), '{"id": "x02", "class": '], 2, r"invalid JSON: Expecting value"),
    "trailing-comma": ([good(), "", '{"id": "x02",}'], 3, r"invalid JSON"),
    "not-object": ([good(), '["a", "list"]'], 2, r"expected a JSON object.*got list"),
    "no-messages": ([good(), json.dumps({"id": "x02", "prompt": "Say hi."})], 2,
                    r"no messages: expected the series' format or an OpenAI chat line.*found keys \['id', 'prompt'\]"),
    "batch-without-messages": ([good(), json.dumps({"custom_id": "r2", "body": {"model": "m"}})], 2,
                               r"a batch-API line needs a body with messages"),
    "batch-bad-message": ([good(), json.dumps({"custom_id": "r2", "body": {"messages": [{"role": "bot",
                                                                                         "content": "x"}]}})], 2,
                          r"messages\[0\] role must be one of system, user, assistant, got 'bot'"),
    "max-tokens-string": ([good(), good(id="x02", max_tokens="64")], 2,
                          r"max_tokens must be a positive integer, got '64'"),
    "max-tokens-zero": ([good(), good(id="x02", max_tokens=0)], 2,
                        r"max_tokens must be a positive integer, got 0"),
    "max-tokens-bool": ([good(), good(id="x02", max_tokens=True)], 2,
                        r"max_tokens must be a positive integer, got True"),
    "id-not-string": ([good(), good(id=7)], 2, r"id must be a non-empty string, got 7"),
    "class-empty": ([good(), good(id="x02", **{"class": ""})], 2,
                    r"class must be a non-empty string"),
    "messages-not-list": ([good(), good(id="x02", messages="Say hi.")], 2,
                          r"messages must be a non-empty list of \{role, content\}"),
    "messages-empty": ([good(), good(id="x02", messages=[])], 2,
                       r"messages must be a non-empty list.*empty list"),
    "message-not-object": ([good(), good(id="x02", messages=["hi"])], 2,
                           r"messages\[0\] is str"),
    "message-missing-content": ([good(), good(id="x02", messages=[{"role": "user"}])], 2,
                                r"messages\[0\] is missing 'content'"),
    "bad-role": ([good(), good(id="x02", messages=[{"role": "bot", "content": "hi"}])], 2,
                 r"messages\[0\] role must be one of system, user, assistant, got 'bot'"),
    "empty-content": ([good(), good(id="x02", messages=[{"role": "user", "content": " "}])], 2,
                      r"messages\[0\] content must be a non-empty string"),
    "last-not-user": ([good(), good(id="x02", messages=[
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])], 2,
        r"last message must be from the user.*'assistant'"),
    "duplicate-id": ([good(id="a"), "", good(id="b"), good(id="a")], 4,
                     r"duplicate id 'a', already used on line 1"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_file_names_file_line_and_problem(tmp_path, case):
    lines, line, pattern = MALFORMED[case]
    path = write(tmp_path, lines)
    with pytest.raises(PromptFileError, match=pattern) as info:
        load_prompts(path)
    err = info.value
    assert err.line == line
    assert str(err).startswith(f"{path}, line {line}: ")
    assert err.path == str(path)


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file(tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(PromptFileError, match="no prompts") as info:
        load_prompts(path)
    assert info.value.line is None
    assert str(path) in str(info.value)


def test_duplicate_id_across_files_names_earlier_file(tmp_path):
    a = write(tmp_path, [good(id="same")], "a.jsonl")
    b = write(tmp_path, [good(id="other"), good(id="same")], "b.jsonl")
    with pytest.raises(PromptFileError, match=r"already used on line 1 of .*a\.jsonl") as info:
        load_prompts([a, b])
    assert info.value.line == 2 and info.value.path == str(b)


def test_invalid_utf8_reports_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(good().encode() + b"\n" + b'{"id": "\xff"}\n')
    with pytest.raises(PromptFileError, match="not valid UTF-8") as info:
        load_prompts(path)
    assert info.value.line == 2


def test_byte_order_mark_is_tolerated(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_text("\ufeff" + good() + "\n", encoding="utf-8")
    assert load_prompts(path)[0].id == "x01"


def test_prompt_file_error_is_value_error():
    assert issubclass(PromptFileError, ValueError)


# ---------------------------------------------------------------------------- select()


def make(cls: str, sub: str, n: int) -> list[Prompt]:
    msgs = [{"role": "user", "content": "q"}]
    return [Prompt(f"{cls}-{sub}-{i}", cls, sub, msgs, 16) for i in range(n)]


def test_select_balances_subcategories_round_robin():
    prompts = make("s", "json", 5) + make("s", "sql", 5) + make("s", "code", 1) \
        + make("c", "poem", 4) + make("c", "story", 4)
    picked = select(prompts, limit_per_class=5)
    per_class = Counter(p.cls for p in picked)
    assert per_class == {"s": 5, "c": 5}
    s_subs = Counter(p.subcategory for p in picked if p.cls == "s")
    assert s_subs == {"json": 2, "sql": 2, "code": 1}
    c_subs = Counter(p.subcategory for p in picked if p.cls == "c")
    assert c_subs == {"poem": 3, "story": 2}
    # first of each subcategory, in file order, and the result keeps the input order
    assert [p.id for p in picked if p.cls == "s"] == [
        "s-json-0", "s-json-1", "s-sql-0", "s-sql-1", "s-code-0"]
    assert picked == [p for p in prompts if p in picked]


def test_select_when_a_subcategory_runs_out():
    prompts = make("s", "a", 1) + make("s", "b", 6)
    picked = select(prompts, limit_per_class=4)
    assert Counter(p.subcategory for p in picked) == {"a": 1, "b": 3}


def test_select_is_stable_and_filters_class(shipped):
    first = select(shipped, cls="creative", limit_per_class=8)
    assert first == select(shipped, cls="creative", limit_per_class=8)
    assert len(first) == 8 and all(p.cls == "creative" for p in first)
    assert Counter(p.subcategory for p in first) == {
        "poem": 2, "story": 2, "brainstorm": 2, "slogan": 2}
    both = select(shipped, limit_per_class=4)
    assert Counter(p.cls for p in both) == {"structured": 4, "creative": 4}
    assert len({p.subcategory for p in both}) == 8


def test_select_no_limit_and_errors(shipped):
    assert select(shipped) == shipped
    assert select(shipped, cls=["structured"]) == [p for p in shipped if p.cls == "structured"]
    with pytest.raises(ValueError, match="no prompts of class 'poetry'"):
        select(shipped, cls="poetry")
    with pytest.raises(ValueError, match="limit_per_class"):
        select(shipped, limit_per_class=0)


# ---------------------------------------------------------------------------- long document


def test_long_document_is_deterministic():
    assert long_document_prompt(200, seed=3) == long_document_prompt(200, seed=3)
    assert long_document_prompt(200, seed=3) != long_document_prompt(200, seed=4)


@pytest.mark.parametrize("n, seed", [(1, 0), (10, 1), (500, 2), (2000, 0)])
def test_long_document_answer_appears_exactly_once(n, seed):
    messages, answer = long_document_prompt(n, seed=seed)
    assert messages[-1]["role"] == "user"
    text = "\n".join(m["content"] for m in messages)
    assert text.count(answer) == 1
    assert text.count("note=") == 1
    records = [line for line in messages[-1]["content"].splitlines() if line.startswith("Record ")]
    assert len(records) == n
    assert "\n" not in answer and answer.strip() == answer


def test_long_document_grows_with_records():
    short = long_document_prompt(10)[0][-1]["content"]
    long = long_document_prompt(1000)[0][-1]["content"]
    assert len(long) > 50 * len(short)


def test_long_document_rejects_bad_size():
    with pytest.raises(ValueError):
        long_document_prompt(0)


def test_long_document_quote_task_asks_to_copy_the_record():
    messages, label = long_document_prompt(50, seed=2, task="quote")
    user = messages[-1]["content"]
    assert "Copy that whole record line" in user
    needle = [line for line in user.splitlines() if "note=" in line]
    assert len(needle) == 1 and needle[0].startswith(label + ":")
    # the same document as the codeword task: only the question differs
    codeword_user = long_document_prompt(50, seed=2)[0][-1]["content"]
    assert user.split("\n\n")[1] == codeword_user.split("\n\n")[1]
    with pytest.raises(ValueError, match="task must be one of"):
        long_document_prompt(5, task="summary")


def _chars_over_4(messages):
    """A stand-in tokenizer (about 4 characters per token): the sizing logic, without a model."""
    return sum(len(m["content"]) for m in messages) // 4 + 10


@pytest.mark.parametrize("target", [200, 777, 2048, 30000])
def test_long_document_for_tokens_is_the_longest_that_fits(target):
    doc = long_document_for_tokens(target, _chars_over_4, seed=1)
    assert doc.tokens == _chars_over_4(doc.messages) <= target
    assert doc.target_tokens == target
    records = [line for line in doc.messages[-1]["content"].splitlines() if line.startswith("Record ")]
    assert len(records) == doc.n_records
    # one more record no longer fits (the search found the boundary, not just any size that fits)
    assert _chars_over_4(long_document_prompt(doc.n_records + 1, seed=1)[0]) > target
    assert doc.tokens > 0.9 * target


def test_long_document_for_tokens_counts_with_the_given_tokenizer():
    # a tokenizer with twice the tokens per character gets about half the records
    coarse = long_document_for_tokens(4000, _chars_over_4)
    fine = long_document_for_tokens(4000, lambda m: 2 * _chars_over_4(m))
    assert fine.n_records < 0.6 * coarse.n_records
    assert fine.tokens <= 4000 and coarse.tokens <= 4000


def test_long_document_for_tokens_passes_task_and_rejects_too_small():
    doc = long_document_for_tokens(500, _chars_over_4, seed=3, task="quote")
    assert doc.answer.startswith("Record ") and "Copy that whole record line" in doc.messages[-1]["content"]
    with pytest.raises(ValueError, match="too short for a long document"):
        long_document_for_tokens(20, _chars_over_4)
    with pytest.raises(ValueError, match="positive integer"):
        long_document_for_tokens(0, _chars_over_4)


# --------------------------------------------------------------------------- the formats users already have
CHAT = [{"role": "system", "content": "Reply in JSON."}, {"role": "user", "content": "A person, please."}]


def test_an_openai_chat_file_loads_as_one_class_with_defaults(tmp_path):
    path = write(tmp_path, [json.dumps({"messages": CHAT}), json.dumps({"model": "x", "messages": CHAT[1:],
                                                                         "max_tokens": 64, "temperature": 0.3})])
    first, second = load_prompts(path)
    assert (first.id, first.cls, first.subcategory, first.max_tokens) == ("line-1", DEFAULT_CLASS, DEFAULT_CLASS,
                                                                          DEFAULT_MAX_TOKENS)
    assert first.messages == CHAT and (second.id, second.max_tokens) == ("line-2", 64)


def test_a_batch_api_file_loads_with_its_custom_ids_and_budgets(tmp_path):
    line = {"custom_id": "req-7", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "gpt", "messages": [{"role": "developer", "content": "Be brief."},
                                                  {"role": "user", "content": [{"type": "text", "text": "Hi "},
                                                                               {"type": "text", "text": "there"}]}],
                     "max_completion_tokens": 80}}
    (prompt,) = load_prompts(write(tmp_path, [json.dumps(line)]))
    assert (prompt.id, prompt.max_tokens, prompt.cls) == ("req-7", 80, DEFAULT_CLASS)
    assert prompt.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]


def test_a_sharegpt_file_loads_the_turns_before_the_first_answer_and_names_bad_entries_by_line(tmp_path):
    entries = [{"id": "a", "conversations": [{"from": "human", "value": "Write SQL for X."},
                                             {"from": "gpt", "value": "SELECT 1;"},
                                             {"from": "human", "value": "and Y?"}]},
               {"conversations": [{"from": "system", "value": "Be terse."}, {"from": "human", "value": "Hi"}],
                "class": "chat"}]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(entries, indent=2), encoding="utf-8")
    first, second = load_prompts(path)
    assert first.id == "a" and first.messages == [{"role": "user", "content": "Write SQL for X."}]
    assert (second.id, second.cls, second.subcategory) == ("entry-2", "chat", "chat")
    bad = entries + [{"conversations": [{"from": "gpt", "value": "I start."}]}]
    path.write_text(json.dumps(bad, indent=2), encoding="utf-8")
    with pytest.raises(PromptFileError, match="messages must be a non-empty list") as info:
        load_prompts(path)
    starts = [i + 1 for i, line in enumerate(json.dumps(bad, indent=2).split("\n")) if line == "  {"]
    assert info.value.line == starts[2]  # the line the third entry starts on
