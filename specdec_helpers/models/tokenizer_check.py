"""Can this draft speculate for that target? Compare their tokenizers, and say what differs.

vLLM's draft-model speculation passes token *ids* from the draft to the target. If the two
tokenizers do not map the same text to the same ids, every proposal is a different token than
the draft meant: acceptance collapses (or vLLM refuses the pair when the vocabulary sizes differ).
So "same tokenizer" means, checkably:

1. the same vocabulary (every token string has the same id);
2. the same merges (BPE) so that text splits into the same tokens;
3. the same special tokens (BOS, EOS, padding, and the chat template's markers);
4. and, as the end-to-end proof, the same ids for a sample of real texts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

SAMPLE_TEXTS = (
    'Return only JSON: {"name": "Ada Lovelace", "born": 1815, "skills": ["math", "poetry"]}',
    "SELECT customer_id, SUM(total) AS revenue FROM orders GROUP BY customer_id ORDER BY revenue DESC;",
    "def fibonacci(n: int) -> int:\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "The lighthouse keeper counted the waves until the fog swallowed the last of the evening light.",
    "Zürich, naïve café, 東京, emoji 🚀 and tabs\tand  double  spaces.",
)


@dataclass
class TokenizerReport:
    """The verdict for a pair, with every check and what differed."""

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

    def as_rows(self) -> list[dict]:
        return [{"check": name, "passed": ok} for name, ok in self.checks.items()]


def load_tokenizer(source):
    """A tokenizer from a folder / hub id, or an already-built tokenizer object."""
    if not isinstance(source, (str, Path)):
        return source
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(source))


def _merges(tokenizer) -> list | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    model = json.loads(backend.to_str()).get("model", {})
    return model.get("merges")


def _special_tokens(tokenizer) -> dict[str, tuple[str | None, int | None]]:
    found = {}
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        token = getattr(tokenizer, name, None)
        found[name] = (token, tokenizer.convert_tokens_to_ids(token) if token else None)
    for token in getattr(tokenizer, "all_special_tokens", []):
        found[f"special {token}"] = (token, tokenizer.convert_tokens_to_ids(token))
    template = getattr(tokenizer, "chat_template", None) or ""
    for marker in ("<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|eot_id|>", "<start_of_turn>"):
        if marker in template:
            found[f"chat marker {marker}"] = (marker, tokenizer.convert_tokens_to_ids(marker))
    return found


def compare_tokenizers(target, draft, texts: Sequence[str] = SAMPLE_TEXTS, *, target_name: str = "target",
                       draft_name: str = "draft", max_listed: int = 5) -> TokenizerReport:
    """Run the four checks; list up to ``max_listed`` concrete differences for each that fails."""
    t, d = load_tokenizer(target), load_tokenizer(draft)
    report = TokenizerReport(target=target_name, draft=draft_name)

    tv, dv = t.get_vocab(), d.get_vocab()
    only_t = sorted(set(tv) - set(dv))
    only_d = sorted(set(dv) - set(tv))
    moved = sorted(tok for tok in set(tv) & set(dv) if tv[tok] != dv[tok])
    report.checks["vocabulary"] = not (only_t or only_d or moved)
    if not report.checks["vocabulary"]:
        report.differences.append(
            f"vocabulary: {len(tv)} vs {len(dv)} tokens; {len(only_t)} only in {target_name} "
            f"(e.g. {only_t[:max_listed]}), {len(only_d)} only in {draft_name} (e.g. {only_d[:max_listed]}), "
            f"{len(moved)} shared tokens with different ids (e.g. {[(m, tv[m], dv[m]) for m in moved[:max_listed]]})")

    tm, dm = _merges(t), _merges(d)
    report.checks["merges"] = tm == dm
    if not report.checks["merges"]:
        report.differences.append(
            f"merges: {len(tm or [])} vs {len(dm or [])} merge rules; first differing: "
            f"{next(((a, b) for a, b in zip(tm or [], dm or []) if a != b), 'length only')}")

    ts, ds = _special_tokens(t), _special_tokens(d)
    differing = {k: (ts.get(k), ds.get(k)) for k in set(ts) | set(ds) if ts.get(k) != ds.get(k)}
    report.checks["special tokens"] = not differing
    if differing:
        listed = list(differing.items())[:max_listed]
        report.differences.append("special tokens: " + "; ".join(f"{k}: {a} vs {b}" for k, (a, b) in listed))

    mismatched = []
    for text in texts:
        a, b = t.encode(text, add_special_tokens=False), d.encode(text, add_special_tokens=False)
        if a != b:
            mismatched.append((text[:40], len(a), len(b)))
    report.checks["same ids on sample texts"] = not mismatched
    if mismatched:
        report.differences.append(
            f"ids differ on {len(mismatched)}/{len(texts)} sample texts, e.g. {mismatched[0][0]!r}: "
            f"{mismatched[0][1]} vs {mismatched[0][2]} tokens")
    return report


def train_toy_tokenizer(texts: Sequence[str], vocab_size: int = 2000):
    """A real BPE tokenizer trained on a few KB of text: the 'other family' for the mismatch demo.

    Built with the `tokenizers` library (what Hugging Face tokenizers are made of), wrapped so it
    offers the same API as the target's.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
