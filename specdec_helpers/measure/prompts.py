"""Prompt sets (data/prompts/README.md) and long documents. The loader reads the formats a vLLM user already has
(the series' JSONL, an OpenAI chat-completions JSONL with plain ``messages`` lines or batch-API lines, a ShareGPT
JSON as ``vllm bench serve`` reads it), and it is strict (a mangled prompt measures something else): every problem is
a PromptFileError naming the file, the line and the problem."""

from __future__ import annotations

import bisect
import itertools
import json
import os
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, ValidationError

#: The shipped sets: ``data/prompts`` of the source checkout (the notebooks run from a clone).
PROMPTS_DIR: Path = Path(__file__).resolve().parents[2] / "data" / "prompts"
#: a prompt without a class: a file without classes is one class (07 says how to split it)
DEFAULT_CLASS = "all"
#: the answer budget of a prompt that gives none (the notebooks' ``max_tokens`` parameter caps every request anyway)
DEFAULT_MAX_TOKENS = 256
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",  # OpenAI's
          "human": "user", "gpt": "assistant"}  # ShareGPT's "from"


@dataclass(frozen=True)
class Prompt:
    """One request (``cls``: the file's "class"); its own ``max_tokens`` keeps runs with and without a draft alike."""

    id: str
    cls: str
    subcategory: str
    messages: list[dict]
    max_tokens: int

    @property
    def user_text(self) -> str:  # the last (user) message: what a reader wants to see in a table
        return str(self.messages[-1]["content"])


class PromptFileError(ValueError):
    """A malformed prompt file: ``path``, ``line`` (None: the whole file) and ``problem``."""

    def __init__(self, path: str | os.PathLike, line: int | None, problem: str) -> None:
        self.path, self.line, self.problem = str(path), line, problem
        super().__init__(f"{self.path}, line {line}: {problem}" if line is not None else f"{self.path}: {problem}")


_MUST = {"max_tokens": "a positive integer", "role": "one of system, user, assistant"}  # else: a non-empty string
_Text = Annotated[str, StringConstraints(strict=True, pattern=r"\S")]  # not only whitespace; kept as written


class _Message(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: _Text


class _Record(BaseModel):
    id: _Text
    cls: _Text = Field(alias="class")
    subcategory: _Text
    max_tokens: Annotated[int, Field(strict=True, gt=0)]  # strict: "max_tokens": true is a mistake, not 1
    messages: Annotated[list[_Message], Field(min_length=1)]


def _content(value: Any) -> Any:
    """OpenAI's content parts (``[{"type": "text", "text": ...}]``) as one text; anything else as it is."""
    if isinstance(value, list) and value and all(isinstance(p, dict) and p.get("type") == "text" for p in value):
        return "".join(str(p.get("text", "")) for p in value)
    return value


def _as_series_record(record: Any, where: str) -> Any:
    """One line or entry of any supported format as the series' record, defaults filled in (``where``: the default
    id); what cannot be read is returned as is, for :func:`_problem` to name."""
    if not isinstance(record, dict):
        return record
    if "body" in record or "custom_id" in record:  # OpenAI batch API: the request is the body
        body = record.get("body")
        if not isinstance(body, dict) or "messages" not in body:
            return {"_problem": "a batch-API line needs a body with messages ({custom_id, body: {messages}})"}
        record = {**{k: v for k, v in record.items() if k != "body"}, "messages": body["messages"],
                  "id": record.get("custom_id", where),
                  **({"max_tokens": body.get("max_tokens", body.get("max_completion_tokens"))}
                     if "max_tokens" in body or "max_completion_tokens" in body else {})}
    elif "conversations" in record and "messages" not in record:  # ShareGPT: the turns before the first answer
        turns = record["conversations"]
        if not isinstance(turns, list) or not all(isinstance(t, dict) and "from" in t for t in turns):
            return {"_problem": "conversations must be a list of {from, value} turns"}
        first_answer = next((i for i, t in enumerate(turns) if _ROLES.get(t["from"]) == "assistant"), len(turns))
        record = {**{k: v for k, v in record.items() if k != "conversations"},
                  "messages": [{"role": t["from"], "content": t.get("value")} for t in turns[:first_answer]]}
    elif "messages" not in record:
        return {"_problem": f"no messages: expected the series' format or an OpenAI chat line {{messages: [...]}}, "
                            f"a batch-API line {{custom_id, body: {{messages}}}} or a ShareGPT entry "
                            f"{{conversations: [...]}}; found keys {sorted(record)[:8]}"}
    messages = record["messages"]
    if isinstance(messages, list):
        messages = [{**m, "role": _ROLES.get(m.get("role"), m.get("role")), "content": _content(m.get("content"))}
                    if isinstance(m, dict) and "role" in m and "content" in m else m for m in messages]
    cls = record.get("class", DEFAULT_CLASS)
    return {**record, "messages": messages, "id": record.get("id", where), "class": cls,
            "subcategory": record.get("subcategory", cls), "max_tokens": record.get("max_tokens", DEFAULT_MAX_TOKENS)}


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _problem(record: Any) -> str | None:
    """What is wrong with one decoded JSON line, in plain words (from pydantic's first error), or None."""
    if not isinstance(record, dict):
        return f"expected a JSON object {{...}}, got {type(record).__name__} {_describe(record)}"
    if "_problem" in record:
        return record["_problem"]
    try:
        _Record.model_validate(record)
    except ValidationError as exc:
        errors = exc.errors()
    else:
        last = record["messages"][-1]["role"]
        return None if last == "user" else f"the last message must be from the user (role 'user'), got role {last!r}"
    # every key is there (the defaults are filled in): the first error is a bad value, or a message's missing key
    loc, value = errors[0]["loc"], errors[0]["input"]
    shape = "messages must be a non-empty list of {role, content} objects"
    what = f"{type(value).__name__} {_describe(value)}"
    if loc == ("messages",):
        return f"{shape}, got {'an empty list' if errors[0]['type'] == 'too_short' else what}"
    if len(loc) == 2:
        return f"{shape}; messages[{loc[1]}] is {what}"
    if absent := [e["loc"][2] for e in errors if e["type"] == "missing" and e["loc"][:2] == loc[:2]]:
        return f"{shape}; messages[{loc[1]}] is missing {', '.join(map(repr, absent))}"
    name = loc[0] if len(loc) == 1 else f"messages[{loc[1]}] {loc[2]}"
    return f"{name} must be {_MUST.get(loc[-1], 'a non-empty string')}, got {_describe(value)}"


def _decoded(path: Path) -> Iterable[tuple[int, str, Any]]:
    """``(line, default id, decoded JSON)`` of every prompt in ``path``: a line of a JSONL file, or an entry of a JSON
    array (ShareGPT, as ``vllm bench serve`` reads it: the line an entry starts on)."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8").lstrip("\ufeff")  # tolerate a byte-order mark from Windows editors
    except UnicodeDecodeError as exc:
        raise PromptFileError(path, data[:exc.start].count(b"\n") + 1, f"not valid UTF-8 text ({exc.reason})") from None
    if text.lstrip().startswith("["):  # one JSON array
        decoder, at, entry = json.JSONDecoder(), text.index("[") + 1, 0
        while True:
            while at < len(text) and text[at] in " \t\r\n,":
                at += 1
            line = text.count("\n", 0, at) + 1
            if at >= len(text) or text[at] == "]":
                if at >= len(text):
                    raise PromptFileError(path, line, "invalid JSON: the array is not closed with ]")
                return
            try:
                record, at = decoder.raw_decode(text, at)
            except json.JSONDecodeError as exc:
                raise PromptFileError(path, exc.lineno, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
            entry += 1
            yield line, f"entry-{entry}", record
    for lineno, line_text in enumerate(text.split("\n"), start=1):
        if not line_text.strip():
            continue
        try:
            yield lineno, f"line-{lineno}", json.loads(line_text)
        except json.JSONDecodeError as exc:
            raise PromptFileError(path, lineno, f"invalid JSON: {exc.msg} (column {exc.colno})") from None


def load_prompts(path_or_paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Prompt]:
    """Prompts from one file or several, in order; ids are unique across them (results join on id). Each file is in
    one of the formats the module docstring lists, told apart line by line; ``class`` defaults to ``DEFAULT_CLASS``,
    ``subcategory`` to the class, the id to the line, ``max_tokens`` to ``DEFAULT_MAX_TOKENS``."""
    paths = [Path(path_or_paths)] if isinstance(path_or_paths, (str, os.PathLike)) else [Path(p) for p in path_or_paths]
    if not paths:
        raise ValueError("load_prompts() needs at least one file path")
    seen: dict[str, tuple[str, int]] = {}  # id -> (file, line) where it was first used, across the files
    prompts: list[Prompt] = []
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"prompt file not found: {path} (a JSONL file with one prompt per line, or a "
                                    f"ShareGPT JSON; data/prompts/README.md; the shipped sets are in {PROMPTS_DIR})")
        if path.is_dir():
            raise IsADirectoryError(f"expected a prompt file (.jsonl or .json), got a directory: {path}")
        loaded = len(prompts)
        for lineno, where, decoded in _decoded(path):
            record = _as_series_record(decoded, where)
            if problem := _problem(record):
                raise PromptFileError(path, lineno, problem)
            if record["id"] in seen:
                first_file, first_line = seen[record["id"]]
                earlier = f"line {first_line}" if first_file == str(path) else f"line {first_line} of {first_file}"
                raise PromptFileError(path, lineno, f"duplicate id {record['id']!r}, already used on {earlier}")
            seen[record["id"]] = (str(path), lineno)
            prompts.append(Prompt(id=record["id"], cls=record["class"], subcategory=record["subcategory"],
                                  messages=[{"role": m["role"], "content": m["content"]} for m in record["messages"]],
                                  max_tokens=record["max_tokens"]))
        if len(prompts) == loaded:
            raise PromptFileError(path, None, "the file has no prompts (it is empty or only blank lines)")
    return prompts


def load_prompt_sets(names: str | Sequence[str] = ("structured", "creative")) -> list[Prompt]:
    """Shipped sets by name; the defaults are the talk's: one where a draft agrees often, one where it does not."""
    names = [names] if isinstance(names, str) else list(names)
    for name in names:
        if not (PROMPTS_DIR / f"{name}.jsonl").exists():
            raise FileNotFoundError(f"no prompt set named {name!r} in {PROMPTS_DIR}; available: "
                                    f"{', '.join(sorted(p.stem for p in PROMPTS_DIR.glob('*.jsonl'))) or 'none'}. "
                                    "For your own file use load_prompts(path).")
    return load_prompts([PROMPTS_DIR / f"{name}.jsonl" for name in names])


def select(prompts: Sequence[Prompt], cls: str | Iterable[str] | None = None,
           limit_per_class: int | None = None) -> list[Prompt]:
    """The prompts of some classes, at most ``limit_per_class`` of each, in input order: taken round-robin
    over subcategories, so a short run still covers them all (not a "structured" average of JSON only)."""
    if limit_per_class is not None and (
            isinstance(limit_per_class, bool) or not isinstance(limit_per_class, int) or limit_per_class <= 0):
        raise ValueError(f"limit_per_class must be a positive integer or None, got {limit_per_class!r}")
    wanted = None if cls is None else {cls} if isinstance(cls, str) else set(cls)
    present = sorted({p.cls for p in prompts})
    if unknown := sorted((wanted or set()) - set(present)):
        raise ValueError(f"no prompts of class {', '.join(map(repr, unknown))}; "
                         f"classes present: {', '.join(present) or 'none'}")
    chosen = [p for p in prompts if wanted is None or p.cls in wanted]
    if limit_per_class is None:
        return chosen
    groups: dict[str, dict[str, list[int]]] = {}  # class -> subcategory -> indices, in order of appearance
    for i, p in enumerate(chosen):
        groups.setdefault(p.cls, {}).setdefault(p.subcategory, []).append(i)
    keep: set[int] = set()
    for by_sub in groups.values():  # the first of each subcategory, then the second of each, ...
        rounds = [i for row in itertools.zip_longest(*by_sub.values()) for i in row if i is not None]
        keep.update(rounds[:limit_per_class])
    return [p for i, p in enumerate(chosen) if i in keep]


# ------------------------------------------------------------------------------- synthetic long context
_DOCUMENT = json.loads((PROMPTS_DIR / "long_document.json").read_text(encoding="utf-8"))  # vocabulary, questions


def long_document_prompt(n_records: int, seed: int = 0, task: str = "codeword") -> tuple[list[dict], str]:
    """(messages, answer) of a needle in ``n_records`` lines (long input, short answer: prefill dominates): the
    codeword (``task="codeword"``), or the line's label ("Record 0042", ``"quote"``)."""
    if isinstance(n_records, bool) or not isinstance(n_records, int) or n_records < 1:
        raise ValueError(f"n_records must be a positive integer, got {n_records!r}")
    if task not in _DOCUMENT["questions"]:
        raise ValueError(f"task must be one of {', '.join(_DOCUMENT['questions'])}, got {task!r}")
    rng, words, width = random.Random(seed), _DOCUMENT, max(4, len(str(n_records)))
    needle = rng.randrange(n_records)
    answer = f"{rng.choice(words['colours'])}-{rng.choice(words['animals'])}-{rng.randint(10, 99)}"
    lines = []
    for i in range(n_records):
        line = (f"Record {i + 1:0{width}d}: warehouse={rng.choice(words['warehouses'])}, "
                f"sku={rng.choice(words['sku_letters'])}{rng.choice(words['sku_letters'])}-{rng.randint(10000, 99999)}"
                f", item={rng.choice(words['items'])}, quantity={rng.randint(1, 500)}, "
                f"checked_by={rng.choice(words['checkers'])}")
        lines.append(line + f", note=audit codeword is {answer}" if i == needle else line)
    if task == "quote":
        answer = f"Record {needle + 1:0{width}d}"
    user = (f"Below is an inventory log with {n_records} records, one per line.\n\n" + "\n".join(lines)
            + f"\n\n{words['questions'][task]}")
    return [{"role": "system", "content": words["system"]}, {"role": "user", "content": user}], answer


@dataclass(frozen=True)
class SizedDocument:
    """A long-document prompt sized in tokens: what was asked for and what was built."""

    target_tokens: int
    tokens: int  # the prompt length built (by the counter given), <= target_tokens
    n_records: int
    messages: list[dict]
    answer: str  # what a correct reply contains (see long_document_prompt)


def long_document_for_tokens(target_tokens: int, count_tokens: Callable[[list[dict]], int], seed: int = 0,
                             task: str = "codeword") -> SizedDocument:
    """The longest :func:`long_document_prompt` of at most ``target_tokens`` by ``count_tokens`` (the target's own,
    ``models.tokenizer.chat_token_counter``). Counts are not monotone in records: the result is one measured to fit."""
    if isinstance(target_tokens, bool) or not isinstance(target_tokens, int) or target_tokens < 1:
        raise ValueError(f"target_tokens must be a positive integer, got {target_tokens!r}")
    built: dict[int, tuple[int, list[dict], str]] = {}

    def fits(n: int) -> bool:
        messages, answer = long_document_prompt(n, seed=seed, task=task)
        built[n] = (int(count_tokens(messages)), messages, answer)
        return built[n][0] <= target_tokens

    if not fits(1):
        raise ValueError(f"a {target_tokens}-token prompt is too short for a long document: one record with "
                         f"the question and chat template already takes {built[1][0]} tokens; ask for more tokens")
    hi = 2
    while fits(hi):
        hi *= 2
    # hi // 2 fits and hi does not: bisect descending, probing the midpoints (rounded down) as plain bisection would
    n = hi - bisect.bisect_left(range(hi, hi // 2, -1), True, lo=1, key=fits)
    tokens, messages, answer = built[n]
    return SizedDocument(target_tokens=target_tokens, tokens=tokens, n_records=n, messages=messages, answer=answer)
