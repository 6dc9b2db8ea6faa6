"""The training prompt mix for the distilled drafts: seeded, and disjoint from ``data/prompts/``.

``vocabulary.json`` holds invented word lists (people, towns, companies, products, tables, function
specs) written for this purpose; ``templates.json`` says, per subcategory, how a request is composed
from them: ordered draws (``[name, op, args...]``, see ``_draw``) filled into ``str.format`` templates.
The draws run in file order, so a seed always gives the same prompts. A prompt whose user text
equals, or shares a run of 6 words with, an evaluation prompt is never used.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import string
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Sequence

HERE = Path(__file__).resolve().parent
VOCABULARY: dict[str, Any] = json.loads((HERE / "vocabulary.json").read_text())
TEMPLATES: dict[str, dict[str, Any]] = json.loads((HERE / "templates.json").read_text())
DEFAULT_SEED = 1234
MIX_VERSION = "mix-v1"
#: subcategory -> share. Structured tasks dominate (that is where a draft pays); a third is general
#: and creative chat so the draft is not useless elsewhere.
MIX: dict[str, float] = {sub: spec["share"] for sub, spec in TEMPLATES.items()}


class _Phrase(str):
    """A drawn string whose first and last words a template can take: ``{person.first}``."""

    @property
    def first(self) -> str:
        return self.split()[0]

    @property
    def last(self) -> str:
        return self.split()[-1]


class _Formatter(string.Formatter):
    """``str.format`` plus the conversions ``{x!l}`` (lower case) and ``{x!t}`` (title case)."""

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion == "l":
            return str(value).lower()
        if conversion == "t":
            return str(value).title()
        return super().convert_field(value, conversion)


_fill = _Formatter().format


def _name(r: random.Random) -> _Phrase:
    return _Phrase(f"{r.choice(VOCABULARY['first_names'])} {r.choice(VOCABULARY['last_names'])}")


def _draw(r: random.Random, env: dict[str, Any], op: str, *args: Any) -> Any:
    """One value for the templates. A pool is a list, an earlier draw or a vocabulary list; a picked
    phrase may refer to earlier draws (``"a weekend in {city}"``)."""
    def pool(p: str | list) -> list:
        return p if isinstance(p, list) else env[p] if p in env else VOCABULARY[p]

    match op:
        case "pick":
            value = r.choice(pool(args[0]))
            return _Phrase(_fill(value, **env)) if isinstance(value, str) else value
        case "sample":  # [pool, k] -> a list; [pool, k, separator] -> the k items joined
            items = r.sample(pool(args[0]), args[1])
            return args[2].join(items) if len(args) > 2 else items
        case "int":
            return r.randint(*args)
        case "flip":  # [p, value below p, value otherwise]
            return args[1] if r.random() < args[0] else args[2]
        case "name":
            return _name(r)
        case "people":  # [lo, hi]: that many first names (each drawn as a full name), comma-separated
            return ", ".join(_name(r).first for _ in range(r.randint(*args)))
        case "date":
            y, m, d = r.randint(2019, 2027), r.randint(1, 12), r.randint(1, 28)
            return SimpleNamespace(human=f"{d} {VOCABULARY['months'][m - 1]} {y}", iso=f"{y}-{m:02d}-{d:02d}")
    raise ValueError(f"unknown draw {op!r}")


def _draw_all(r: random.Random, env: dict[str, Any], draws: list[list]) -> None:
    for var, op, *args in draws:
        env[var] = _draw(r, env, op, *args)


def _one(r: random.Random, templates: str | list[str]) -> str:
    """A list of templates is a choice; a single template draws nothing."""
    return r.choice(templates) if isinstance(templates, list) else templates


def _from_kinds(r: random.Random, spec: dict) -> str:
    """JSON and chat requests: one of the kinds, its draws, its text inside one of the user templates."""
    kind = spec["kinds"][r.randrange(len(spec["kinds"]))]
    env: dict[str, Any] = {}
    _draw_all(r, env, spec.get("draw", []) + kind.get("draw", []))
    env.update(kind.get("given", {}))
    if "fields" in kind:
        env["schema"] = "{" + ", ".join(f'"{k}": {t}' for k, t in kind["fields"].items()) + "}"
    env["text"] = _fill(_one(r, kind["text"]), **env)
    return _fill(_one(r, spec["user"]), **env)


def _sql(r: random.Random, spec: dict) -> str:
    """The tasks offered depend on the drawn table's numeric, categorical and date columns."""
    t, cols = r.choice(list(VOCABULARY["tables"].items()))
    env: dict[str, Any] = {
        "t": t, "table": f"{t}({', '.join(cols)})", "columns": ", ".join(cols), "cols": cols,
        "num": [c for c in cols if c in VOCABULARY["numeric_columns"]],
        "cat": [c for c in cols if c in VOCABULARY["category_columns"]],
        "date": [c for c in cols if c.endswith(("_date", "_at", "_on")) or c == "released"],
    }
    tasks: list[str] = []
    for group in spec["tasks"]:
        if all(env[need] for need in group["needs"]):
            _draw_all(r, env, group["draw"])
            tasks += group["text"]
    if r.random() < spec["ddl_share"]:
        return _fill(r.choice(spec["ddl"]), **env)
    env["task"] = _fill(r.choice(tasks), **env)
    return _fill(r.choice(spec["user"]), **env)


def _code(r: random.Random, spec: dict) -> str:
    lang = r.choices(list(spec["languages"]), weights=list(spec["languages"].values()))[0]
    if r.random() < spec["class_share"] and lang == "Python":
        name, what = r.choice(VOCABULARY["classes"])
        return _fill(r.choice(spec["class_user"]), name=name, what=what) + r.choice(spec["class_suffix"])
    sig, what = r.choice(VOCABULARY["functions"])
    if lang == "JavaScript":
        name, args = sig.split("(", 1)
        sig = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name) + "(" + args
    suffixes = [s.format(style=spec["style"][lang]) for s in spec["function_suffix"]]
    return _fill(r.choice(spec["function_user"]), lang=lang, sig=sig, what=what) + r.choice(suffixes)


_USER_TEXT: dict[str, Callable[[random.Random, dict], str]] = {"sql": _sql, "code": _code}


def _shingles(text: str, n: int = 6) -> set[tuple[str, ...]]:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def _held_out() -> tuple[set[str], set[tuple[str, ...]]]:
    """The evaluation sets' user texts and their 6-word runs."""
    from specdec_helpers.measure.prompts import load_prompt_sets

    texts = {m["content"] for p in load_prompt_sets(["structured", "creative"]) for m in p.messages
             if m["role"] == "user"}
    return texts, set().union(*(_shingles(t) for t in texts))


def build_prompts(n: int, seed: int = DEFAULT_SEED) -> list[dict]:
    """``n`` distinct training prompts (seeded), disjoint from the evaluation sets."""
    r = random.Random(seed)
    held_texts, held_shingles = _held_out()
    out: list[dict] = []
    seen: set[str] = set()
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n:
            raise RuntimeError(f"only {len(out)} distinct prompts after {attempts} attempts")
        sub = r.choices(list(MIX), weights=list(MIX.values()))[0]
        spec = TEMPLATES[sub]
        user = _USER_TEXT.get(sub, _from_kinds)(r, spec)
        system = VOCABULARY["system_prompts"][spec["system"]]
        messages = [{"role": "system", "content": r.choice(system)}] if r.random() < spec["system_share"] else []
        messages.append({"role": "user", "content": user})
        key = json.dumps(messages, sort_keys=True)
        if key in seen or user in held_texts or _shingles(user) & held_shingles:
            continue  # never train on anything that reads like a held-out evaluation prompt
        seen.add(key)
        out.append({"id": f"d{len(out):05d}-{sub}", "subcategory": sub, "messages": messages,
                    "max_tokens": spec["max_tokens"]})
    return out


def check_disjoint(prompts: Iterable[dict]) -> None:
    held_texts, held_shingles = _held_out()
    for p in prompts:
        user = p["messages"][-1]["content"]
        assert user not in held_texts, f"training prompt {p['id']} is an evaluation prompt"
        assert not (_shingles(user) & held_shingles), f"training prompt {p['id']} shares a 6-word run"


def mix_id(prompts: Sequence[dict], seed: int) -> str:
    digest = hashlib.sha256(json.dumps(prompts, sort_keys=True).encode()).hexdigest()[:10]
    return f"{MIX_VERSION}-s{seed}-n{len(prompts)}-{digest}"
