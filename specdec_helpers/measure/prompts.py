"""Prompt sets: load, check, summarise and subsample the JSONL files the experiments run on.

Speculative decoding pays off or not depending on the *workload*: a draft guesses the next
tokens of JSON, SQL or code far more often than those of a poem. So every experiment in the
series is run over prompt sets labelled by class ("structured", "creative", or your own), and
results are grouped by those labels. This module is the one place that reads those files.

File format (one JSON object per line, blank lines allowed)::

    {"id": "s01-json-schema-person", "class": "structured", "subcategory": "json_schema",
     "messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}],
     "max_tokens": 96}

The loader is strict on purpose: a benchmark that silently skips or mangles a prompt measures
something other than what the reader thinks. Every problem is reported as a
:class:`PromptFileError` naming the file, the line and what is wrong, in plain words, so that
an engineer bringing their own file can fix it without reading this code.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:  # pandas is imported lazily: loading prompts should not need it.
    import pandas as pd

__all__ = [
    "PROMPTS_DIR",
    "Prompt",
    "PromptFileError",
    "load_prompts",
    "load_prompt_sets",
    "available_prompt_sets",
    "prompts_frame",
    "select",
    "long_document_prompt",
    "SizedDocument",
    "long_document_for_tokens",
    "chat_token_counter",
]

#: Where the shipped prompt sets live: ``data/prompts`` at the repository root. This is a
#: source-checkout path (the notebooks run from a clone or an editable install), not package data.
PROMPTS_DIR: Path = Path(__file__).resolve().parents[2] / "data" / "prompts"

PathLike = Union[str, "os.PathLike[str]"]

REQUIRED_KEYS: tuple[str, ...] = ("id", "class", "subcategory", "messages", "max_tokens")
ROLES: tuple[str, ...] = ("system", "user", "assistant")


@dataclass(frozen=True)
class Prompt:
    """One request of a workload: the chat messages sent and the generation budget.

    ``cls`` is the workload class (the JSON key is ``"class"``, a Python keyword); results are
    compared across classes, and across ``subcategory`` within a class. ``max_tokens`` is part
    of the prompt rather than a global setting because the speed-up is measured on generated
    tokens: a fixed, per-prompt budget keeps runs with and without speculation comparable.
    """

    id: str
    cls: str
    subcategory: str
    messages: list[dict]
    max_tokens: int

    def to_dict(self) -> dict[str, Any]:
        """The prompt in the file's schema (``"class"`` key), e.g. to write a JSONL line."""
        return {
            "id": self.id,
            "class": self.cls,
            "subcategory": self.subcategory,
            "messages": [dict(m) for m in self.messages],
            "max_tokens": self.max_tokens,
        }

    @property
    def user_text(self) -> str:
        """Content of the last (user) message: the part a reader wants to see in a table."""
        return str(self.messages[-1]["content"])


class PromptFileError(ValueError):
    """A prompt file is malformed. The message names the file, the 1-based line and the problem.

    Attributes ``path``, ``line`` (``None`` when the problem is the whole file) and ``problem``
    let code react to it; the message is written for a person fixing the file.
    """

    def __init__(self, path: PathLike, line: int | None, problem: str) -> None:
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}, line {line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


# --------------------------------------------------------------------------------------------
# Loading


def _describe(value: Any) -> str:
    """repr() of a bad value, shortened so that an error message stays one readable line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_messages(messages: Any) -> str | None:
    """Return a plain-words problem with ``messages``, or None if it is a valid chat."""
    shape = "messages must be a non-empty list of {role, content} objects"
    if not isinstance(messages, list):
        return f"{shape}, got {type(messages).__name__} {_describe(messages)}"
    if not messages:
        return f"{shape}, got an empty list"
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            return f"{shape}; messages[{i}] is {type(msg).__name__} {_describe(msg)}"
        missing = [k for k in ("role", "content") if k not in msg]
        if missing:
            return f"{shape}; messages[{i}] is missing {', '.join(repr(k) for k in missing)}"
        if msg["role"] not in ROLES:
            return (f"messages[{i}] role must be one of {', '.join(ROLES)}, "
                    f"got {_describe(msg['role'])}")
        if not isinstance(msg["content"], str) or not msg["content"].strip():
            return (f"messages[{i}] content must be a non-empty string, "
                    f"got {_describe(msg['content'])}")
    if messages[-1]["role"] != "user":
        return (f"the last message must be from the user (role 'user'), "
                f"got role {messages[-1]['role']!r}")
    return None


def _parse_record(record: Any) -> Prompt | str:
    """Turn one decoded JSON value into a Prompt, or return the problem in plain words."""
    if not isinstance(record, dict):
        return f"expected a JSON object {{...}}, got {type(record).__name__} {_describe(record)}"
    missing = [k for k in REQUIRED_KEYS if k not in record]
    if missing:
        return (f"missing key(s): {', '.join(repr(k) for k in missing)} "
                f"(each line needs {', '.join(REQUIRED_KEYS)})")
    for key in ("id", "class", "subcategory"):
        value = record[key]
        if not isinstance(value, str) or not value.strip():
            return f"{key} must be a non-empty string, got {_describe(value)}"
    max_tokens = record["max_tokens"]
    # bool is a subclass of int in Python; "max_tokens": true is a mistake, not 1.
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
        return f"max_tokens must be a positive integer, got {_describe(max_tokens)}"
    problem = _check_messages(record["messages"])
    if problem:
        return problem
    return Prompt(
        id=record["id"],
        cls=record["class"],
        subcategory=record["subcategory"],
        messages=[dict(m) for m in record["messages"]],
        max_tokens=max_tokens,
    )


def _read_file(path: Path, seen: dict[str, tuple[str, int]]) -> list[Prompt]:
    """Read one JSONL file; ``seen`` maps ids already loaded to (file, line) across files."""
    if not path.exists():
        raise FileNotFoundError(
            f"prompt file not found: {path} (a JSONL file with one prompt per line; "
            f"the shipped sets are in {PROMPTS_DIR})")
    if path.is_dir():
        raise IsADirectoryError(f"expected a prompt file (.jsonl), got a directory: {path}")
    prompts: list[Prompt] = []
    # Decode line by line so that a bad byte is reported at its line, like any other problem.
    for lineno, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PromptFileError(path, lineno, f"not valid UTF-8 text ({exc.reason})") from None
        if lineno == 1:
            text = text.lstrip("\ufeff")  # tolerate a byte-order mark from Windows editors
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PromptFileError(
                path, lineno, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
        result = _parse_record(record)
        if isinstance(result, str):
            raise PromptFileError(path, lineno, result)
        if result.id in seen:
            first_file, first_line = seen[result.id]
            earlier = (f"line {first_line}" if first_file == str(path)
                       else f"line {first_line} of {first_file}")
            raise PromptFileError(
                path, lineno, f"duplicate id {result.id!r}, already used on {earlier}")
        seen[result.id] = (str(path), lineno)
        prompts.append(result)
    if not prompts:
        raise PromptFileError(path, None, "the file has no prompts (it is empty or only blank lines)")
    return prompts


def load_prompts(path_or_paths: PathLike | Iterable[PathLike]) -> list[Prompt]:
    """Load and check prompts from one JSONL file or several, in file and line order.

    Ids must be unique across all the files given, because results are joined back to prompts
    by id. Raises FileNotFoundError for a missing file and PromptFileError for a malformed one.
    """
    if isinstance(path_or_paths, (str, os.PathLike)):
        paths = [Path(path_or_paths)]
    else:
        paths = [Path(p) for p in path_or_paths]
    if not paths:
        raise ValueError("load_prompts() needs at least one file path")
    seen: dict[str, tuple[str, int]] = {}
    prompts: list[Prompt] = []
    for path in paths:
        prompts.extend(_read_file(path, seen))
    return prompts


def available_prompt_sets() -> list[str]:
    """Names of the shipped prompt sets (``data/prompts/*.jsonl`` without the suffix)."""
    return sorted(p.stem for p in PROMPTS_DIR.glob("*.jsonl"))


def load_prompt_sets(names: str | Sequence[str] = ("structured", "creative")) -> list[Prompt]:
    """Load shipped prompt sets by name, e.g. ``load_prompt_sets(["structured"])``.

    The two default sets mirror the talk's demo: structured output (JSON, SQL, code), where a
    draft should agree with the target often, and creative writing, where it should not.
    """
    if isinstance(names, str):
        names = [names]
    paths = []
    for name in names:
        path = PROMPTS_DIR / f"{name}.jsonl"
        if not path.exists():
            raise FileNotFoundError(
                f"no prompt set named {name!r} in {PROMPTS_DIR}; "
                f"available: {', '.join(available_prompt_sets()) or 'none'}. "
                f"For your own file use load_prompts(path).")
        paths.append(path)
    return load_prompts(paths)


# --------------------------------------------------------------------------------------------
# Looking at and subsampling prompt sets


def prompts_frame(prompts: Iterable[Prompt]) -> "pd.DataFrame":
    """One row per prompt, for display and for joining with measurements on ``id``.

    Columns: id, class, subcategory, max_tokens, n_messages, has_system, prompt_chars
    (all message contents together: a rough size of the prefill) and user_prompt.
    """
    import pandas as pd

    rows = [
        {
            "id": p.id,
            "class": p.cls,
            "subcategory": p.subcategory,
            "max_tokens": p.max_tokens,
            "n_messages": len(p.messages),
            "has_system": any(m["role"] == "system" for m in p.messages),
            "prompt_chars": sum(len(str(m["content"])) for m in p.messages),
            "user_prompt": p.user_text,
        }
        for p in prompts
    ]
    columns = ["id", "class", "subcategory", "max_tokens", "n_messages", "has_system",
               "prompt_chars", "user_prompt"]
    return pd.DataFrame(rows, columns=columns)


def select(
    prompts: Sequence[Prompt],
    cls: str | Iterable[str] | None = None,
    limit_per_class: int | None = None,
) -> list[Prompt]:
    """Keep the prompts of some classes and at most ``limit_per_class`` of each, for smoke runs.

    A short run should still cover every subcategory, or a "structured" average could be all
    JSON and no SQL. So within each class the prompts are taken round-robin over subcategories
    (the first of each subcategory, then the second of each, ...), in file order. The result
    is stable (same input, same output; kept in the input's order), and subcategory counts
    within a class differ by at most one unless a subcategory runs out.
    """
    if limit_per_class is not None and (
            isinstance(limit_per_class, bool) or not isinstance(limit_per_class, int)
            or limit_per_class <= 0):
        raise ValueError(f"limit_per_class must be a positive integer or None, "
                         f"got {limit_per_class!r}")
    if cls is None:
        chosen = list(prompts)
    else:
        wanted = {cls} if isinstance(cls, str) else set(cls)
        present = sorted({p.cls for p in prompts})
        unknown = sorted(wanted - set(present))
        if unknown:
            raise ValueError(f"no prompts of class {', '.join(map(repr, unknown))}; "
                             f"classes present: {', '.join(present) or 'none'}")
        chosen = [p for p in prompts if p.cls in wanted]
    if limit_per_class is None:
        return chosen

    # Group indices by class, then by subcategory, both in order of first appearance.
    groups: dict[str, dict[str, list[int]]] = {}
    for i, p in enumerate(chosen):
        groups.setdefault(p.cls, {}).setdefault(p.subcategory, []).append(i)
    keep: set[int] = set()
    for by_sub in groups.values():
        queues = [list(ix) for ix in by_sub.values()]
        taken = 0
        while taken < limit_per_class and any(queues):
            for queue in queues:
                if queue and taken < limit_per_class:
                    keep.add(queue.pop(0))
                    taken += 1
    return [p for i, p in enumerate(chosen) if i in keep]


# --------------------------------------------------------------------------------------------
# Synthetic long context


_WAREHOUSES = ("Harbor-1", "Harbor-3", "Ridge-2", "Ridge-5", "Valley-4", "Delta-7", "North-6")
_ITEMS = ("bolts", "hinges", "cables", "filters", "gaskets", "valves", "brackets", "fuses",
          "washers", "pulleys")
_CHECKERS = ("Lina", "Omar", "Greta", "Tobias", "Yuki", "Ravi", "Ines", "Marek")
_CODE_COLOURS = ("AMBER", "COBALT", "CRIMSON", "JADE", "SAFFRON", "INDIGO", "COPPER")
_CODE_ANIMALS = ("FALCON", "OTTER", "LYNX", "HERON", "BISON", "MARTEN", "IBEX")


#: What a reply to the long-document question is asked for: the codeword alone (a few tokens), or
#: the whole record line quoted (copied from the document: the case n-gram lookup is built for).
DOCUMENT_TASKS: tuple[str, ...] = ("codeword", "quote")


def long_document_prompt(n_records: int, seed: int = 0, task: str = "codeword") -> tuple[list[dict], str]:
    """A needle-in-a-haystack prompt whose length you choose: (messages, expected_answer).

    Speculative decoding speeds up decoding, not prefill; with a long input and a short answer
    most of the time goes to reading the prompt, so the speed-up shrinks. This builds such a
    workload: ``n_records`` lines of a fake inventory log (about 90 characters each, about 45
    tokens with tokenizers that split digits one by one; never guess, count with the target's
    tokenizer: :func:`long_document_for_tokens` sizes a document by tokens), exactly one of which
    carries a note with an audit codeword, and a question on that record.

    ``task="codeword"`` asks for the codeword alone; ``expected_answer`` is the codeword.
    ``task="quote"`` asks to copy that record line exactly; the answer is then copied from the
    prompt (what prompt-lookup speculation is built for), and ``expected_answer`` is the record's
    label (``"Record 0042"``), which a correct reply starts with even when it is cut short.
    Either lets you check the model still read the document, so a speed-up is not bought with a
    wrong answer.

    Deterministic for a given (n_records, seed, task); uses only the stdlib ``random``.
    """
    if isinstance(n_records, bool) or not isinstance(n_records, int) or n_records < 1:
        raise ValueError(f"n_records must be a positive integer, got {n_records!r}")
    if task not in DOCUMENT_TASKS:
        raise ValueError(f"task must be one of {', '.join(DOCUMENT_TASKS)}, got {task!r}")
    rng = random.Random(seed)
    width = max(4, len(str(n_records)))
    needle = rng.randrange(n_records)
    answer = f"{rng.choice(_CODE_COLOURS)}-{rng.choice(_CODE_ANIMALS)}-{rng.randint(10, 99)}"
    lines = []
    for i in range(n_records):
        line = (
            f"Record {i + 1:0{width}d}: warehouse={rng.choice(_WAREHOUSES)}, "
            f"sku={rng.choice('ABCDEFGHJKMNPQRSTUVWXYZ')}{rng.choice('ABCDEFGHJKMNPQRSTUVWXYZ')}"
            f"-{rng.randint(10000, 99999)}, item={rng.choice(_ITEMS)}, "
            f"quantity={rng.randint(1, 500)}, checked_by={rng.choice(_CHECKERS)}"
        )
        if i == needle:
            line += f", note=audit codeword is {answer}"
        lines.append(line)
    document = "\n".join(lines)
    if task == "codeword":
        question = ("Exactly one record above has a note field. What is the audit codeword in that note? "
                    "Reply with the codeword only, on one line.")
    else:
        question = ("Exactly one record above has a note field. Copy that whole record line exactly as "
                    "it appears above, and nothing else.")
        answer = f"Record {needle + 1:0{width}d}"
    user = (
        f"Below is an inventory log with {n_records} records, one per line.\n\n"
        f"{document}\n\n"
        f"{question}"
    )
    messages = [
        {"role": "system",
         "content": "You answer questions about the document you are given. Be brief."},
        {"role": "user", "content": user},
    ]
    return messages, answer


#: Counts the prompt tokens of a chat (a list of messages) as the server will see them.
TokenCounter = Callable[[list[dict]], int]


@dataclass(frozen=True)
class SizedDocument:
    """A long-document prompt sized in tokens: what was asked for and what was built."""

    target_tokens: int  # the prompt length asked for
    tokens: int  # the prompt length built (target's tokenizer and chat template), <= target_tokens
    n_records: int  # records in the document
    messages: list[dict]
    answer: str  # what a correct reply contains (see long_document_prompt)


def long_document_for_tokens(target_tokens: int, count_tokens: TokenCounter, seed: int = 0,
                             task: str = "codeword") -> SizedDocument:
    """The longest :func:`long_document_prompt` whose prompt is at most ``target_tokens`` tokens.

    Why tokens and not records: a record costs about 28 tokens with one tokenizer and 45 with
    another (those that split digits one by one), and a server refuses any prompt that does not
    fit its context window. Counting with the target's own tokenizer and chat template
    (:func:`chat_token_counter`) makes "a 2,000-token prompt" mean the same on every model.

    Searches the record count by doubling then bisection, keeping the largest count whose prompt
    was measured to fit (so the result fits even though token counts are not strictly monotone
    in the record count); about 2·log2(records) calls to ``count_tokens``.
    Raises ValueError when even a one-record document is longer than ``target_tokens``.
    """
    if isinstance(target_tokens, bool) or not isinstance(target_tokens, int) or target_tokens < 1:
        raise ValueError(f"target_tokens must be a positive integer, got {target_tokens!r}")

    def build(n: int) -> tuple[int, list[dict], str]:
        messages, answer = long_document_prompt(n, seed=seed, task=task)
        return int(count_tokens(messages)), messages, answer

    best = build(1)
    if best[0] > target_tokens:
        raise ValueError(f"a {target_tokens}-token prompt is too short for a long document: one record with "
                         f"the question and chat template already takes {best[0]} tokens; ask for more tokens")
    lo, hi = 1, 2  # lo fits; find hi that does not
    while True:
        built = build(hi)
        if built[0] > target_tokens:
            break
        lo, best = hi, built
        hi *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        built = build(mid)
        if built[0] <= target_tokens:
            lo, best = mid, built
        else:
            hi = mid
    tokens, messages, answer = best
    return SizedDocument(target_tokens=target_tokens, tokens=tokens, n_records=lo, messages=messages,
                         answer=answer)


def chat_token_counter(model_dir: PathLike, chat_template_kwargs: dict | None = None) -> TokenCounter:
    """A :data:`TokenCounter` with the model's own tokenizer and chat template.

    Counts what vLLM's chat endpoint will prefill: the template applied with the generation
    prompt (the "assistant" header) added, as the server does. ``chat_template_kwargs`` are passed
    to the template (e.g. ``{"enable_thinking": False}`` for Qwen3), as the server would.
    Needs ``transformers`` and the model's tokenizer files (``resolve_model`` provides them).
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    extra = dict(chat_template_kwargs or {})

    def count(messages: list[dict]) -> int:
        ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True, **extra)
        if hasattr(ids, "keys") and "input_ids" in ids:  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return len(ids)

    return count
