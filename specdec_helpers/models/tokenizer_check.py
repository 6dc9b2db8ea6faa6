"""Can this draft speculate for that target? vLLM passes token *ids* from draft to target, so the tokenizers need
the same vocabulary, merges, special tokens and ids for real texts, or acceptance collapses."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from specdec_helpers.models.tokenizer import load_tokenizer

SAMPLE_TEXTS = (
    'Return only JSON: {"name": "Ada Lovelace", "born": 1815, "skills": ["math", "poetry"]}',
    "SELECT customer_id, SUM(total) AS revenue FROM orders GROUP BY customer_id ORDER BY revenue DESC;",
    "def fibonacci(n: int) -> int:\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "The lighthouse keeper counted the waves until the fog swallowed the last of the evening light.",
    "Zürich, naïve café, 東京, emoji 🚀 and tabs\tand  double  spaces.",
)


@dataclass
class TokenizerReport:
    """The verdict for a pair: every check by name, and what differed."""

    target: str
    draft: str
    checks: dict[str, bool] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)

    @property
    def compatible(self) -> bool:
        return all(self.checks.values())

    @property
    def verdict(self) -> str:
        if self.compatible:
            return "compatible: same vocabulary, merges, special tokens and ids; usable as a draft"
        failed = ", ".join(name for name, ok in self.checks.items() if not ok)
        return f"incompatible ({failed}): vLLM's draft-model speculation needs the target's vocabulary"


def _merges(tokenizer) -> list | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return None if backend is None else json.loads(backend.to_str()).get("model", {}).get("merges")


def _special_tokens(tokenizer) -> dict[str, tuple[str | None, int | None]]:
    ids = tokenizer.convert_tokens_to_ids
    named = {name: getattr(tokenizer, name, None) for name in ("bos_token", "eos_token", "pad_token", "unk_token")}
    found = {name: (token, ids(token) if token else None) for name, token in named.items()}
    found.update({f"special {t}": (t, ids(t)) for t in getattr(tokenizer, "all_special_tokens", [])})
    template = getattr(tokenizer, "chat_template", None) or ""
    markers = ("<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|eot_id|>", "<start_of_turn>")
    found.update({f"chat marker {m}": (m, ids(m)) for m in markers if m in template})
    return found


def compare_tokenizers(target, draft, *, target_name: str = "target", draft_name: str = "draft") -> TokenizerReport:
    """The four checks on two tokenizers (or their folders / hub ids), with up to 5 differences for a failure."""
    t, d = (load_tokenizer(x) if isinstance(x, (str, Path)) else x for x in (target, draft))
    report, n, texts = TokenizerReport(target=target_name, draft=draft_name), 5, SAMPLE_TEXTS

    def check(name: str, ok: bool, difference: Callable[[], str]) -> None:
        report.checks[name] = ok
        if not ok:
            report.differences.append(difference())

    tv, dv = t.get_vocab(), d.get_vocab()
    only_t, only_d = sorted(set(tv) - set(dv)), sorted(set(dv) - set(tv))
    moved = sorted(tok for tok in set(tv) & set(dv) if tv[tok] != dv[tok])
    check("vocabulary", not (only_t or only_d or moved), lambda: (
        f"vocabulary: {len(tv)} vs {len(dv)} tokens; {len(only_t)} only in {target_name} (e.g. {only_t[:n]}), "
        f"{len(only_d)} only in {draft_name} (e.g. {only_d[:n]}), {len(moved)} shared tokens with different "
        f"ids (e.g. {[(m, tv[m], dv[m]) for m in moved[:n]]})"))
    tm, dm = _merges(t), _merges(d)
    check("merges", tm == dm, lambda: (
        f"merges: {len(tm or [])} vs {len(dm or [])} merge rules; first differing: "
        f"{next(((a, b) for a, b in zip(tm or [], dm or []) if a != b), 'length only')}"))
    ts, ds = _special_tokens(t), _special_tokens(d)
    differing = [(k, ts.get(k), ds.get(k)) for k in set(ts) | set(ds) if ts.get(k) != ds.get(k)]
    check("special tokens", not differing,
          lambda: "special tokens: " + "; ".join(f"{k}: {a} vs {b}" for k, a, b in differing[:n]))
    encoded = [(text, t.encode(text, add_special_tokens=False), d.encode(text, add_special_tokens=False))
               for text in texts]
    mismatched = [(text[:40], len(a), len(b)) for text, a, b in encoded if a != b]
    check("same ids on sample texts", not mismatched, lambda: (
        f"ids differ on {len(mismatched)}/{len(texts)} sample texts, e.g. {mismatched[0][0]!r}: "
        f"{mismatched[0][1]} vs {mismatched[0][2]} tokens"))
    return report


def train_toy_tokenizer(texts: list[str], vocab_size: int = 2000):
    """A real BPE tokenizer trained on a few KB of text: the 'other family' for the mismatch demo."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
