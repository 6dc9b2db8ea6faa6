"""Distil small SmolLM2-shaped drafts from the target: the recipe behind ``data/drafts/``.

No model smaller than SmolLM2-135M-Instruct shares its tokenizer offline, and cutting layers off the
target does not make a draft (1-6% agreement). So the CPU profile trains its drafts: the target's own
architecture with N layers, its embedding and (tied) LM head copied in and frozen, the N layers
(started from target layers spread over the depth) and the final norm trained on the target's greedy
answers (cross-entropy on its tokens plus a top-k logit term; logits only at answer positions, the
576 x 49152 LM head being most of the cost). Steps and numbers: README.md here and in data/drafts/.
Generated data lives in ``cache_root()/distill``; only the trained tensors are shipped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from recipes.distill_drafts.mix import (
    DEFAULT_SEED,
    MIX,
    build_prompts,
    check_disjoint,
    mix_id,
)

log = logging.getLogger("specdec.distill")

TARGET = "smollm2-135m-instruct"
DRAFTS_DIR = Path(__file__).resolve().parents[2] / "data" / "drafts"
TOPK = 8


def distill_dir() -> Path:
    from specdec_helpers.models.model_cache import cache_root

    return cache_root() / "distill"


def draft_key(layers: int) -> str:
    return f"smollm2-draft-{layers}l"


# --- 1. The prompt mix (mix.py), written to the cache -----------------------------------------

def cmd_prompts(args) -> Path:
    prompts = build_prompts(args.n, args.seed)
    check_disjoint(prompts)
    folder = distill_dir() / mix_id(prompts, args.seed)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "prompts.jsonl"
    with open(path, "w") as fh:
        for p in prompts:
            fh.write(json.dumps(p) + "\n")
    log.info("wrote %d prompts to %s: %s", len(prompts), path, dict(Counter(p["subcategory"] for p in prompts)))
    return path


# --- 2. Target answers with vLLM (greedy, batched), with the target's top-k log-probabilities ---

def _mix_folder(n: int, seed: int) -> Path:
    prompts = build_prompts(n, seed)
    folder = distill_dir() / mix_id(prompts, seed)
    if not (folder / "prompts.jsonl").exists():
        raise SystemExit(f"no prompts in {folder}: run `python -m recipes.distill_drafts --n {n} --seed {seed} "
                         "prompts` first")
    return folder


def load_answers(folder: Path) -> list[dict]:
    path = folder / "answers.jsonl"
    if not path.exists():
        return []
    rows = []
    with open(path) as fh:
        for line in fh:
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:  # a line cut by an interrupted run
                    break
    return rows


def cmd_generate(args) -> None:
    """Generate the target's greedy answers; appends chunk by chunk, so it resumes."""
    from tqdm.auto import tqdm

    from specdec_helpers.models.resolve import resolve_model

    folder = _mix_folder(args.n, args.seed)
    prompts = [json.loads(line) for line in open(folder / "prompts.jsonl")]
    done = {row["id"] for row in load_answers(folder)}
    todo = [p for p in prompts if p["id"] not in done][: args.limit or None]
    if not todo:
        log.info("all %d answers already in %s", len(prompts), folder / "answers.jsonl")
        return
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(args.kv_gib))
    from vllm import LLM, SamplingParams

    target = resolve_model(TARGET)
    # float32 and greedy, as the drafts are served and measured later (VLLMServer dtype=auto).
    llm = LLM(model=str(target), dtype="float32", enforce_eager=True, max_model_len=1024,
              seed=args.seed, max_num_seqs=args.batch, max_logprobs=TOPK)
    bar = tqdm(total=len(todo), desc="target answers", unit="prompt")
    tokens = 0
    started = time.perf_counter()
    with open(folder / "answers.jsonl", "a") as fh:
        for i in range(0, len(todo), args.chunk):
            chunk = todo[i:i + args.chunk]
            params = [SamplingParams(temperature=0.0, max_tokens=p["max_tokens"], logprobs=TOPK,
                                     detokenize=False, seed=args.seed) for p in chunk]
            outs = llm.chat([p["messages"] for p in chunk], params, use_tqdm=False)
            for p, out in zip(chunk, outs):
                gen = out.outputs[0]
                top_ids, top_lp = [], []
                for pos in gen.logprobs or []:
                    best = sorted(pos.items(), key=lambda kv: kv[1].rank)[:TOPK]
                    top_ids.append([int(t) for t, _ in best])
                    top_lp.append([round(float(lp.logprob), 4) for _, lp in best])
                fh.write(json.dumps({"id": p["id"], "subcategory": p["subcategory"],
                                     "prompt_ids": list(out.prompt_token_ids),
                                     "answer_ids": list(gen.token_ids),
                                     "finish_reason": gen.finish_reason,
                                     "top_ids": top_ids, "top_logprobs": top_lp}) + "\n")
                tokens += len(gen.token_ids)
            fh.flush()
            bar.update(len(chunk))
            bar.set_postfix(tok_s=f"{tokens / (time.perf_counter() - started):.0f}", tokens=tokens)
    bar.close()
    log.info("generated %d answer tokens for %d prompts in %.0f s", tokens, len(todo),
             time.perf_counter() - started)


# --- 3. Training one draft depth -------------------------------------------------------------

def source_layers(layers: int, target_layers: int = 30) -> list[int]:
    """Target layers the student's layers start from: spread over the depth, first and last."""
    if layers == 1:
        return [0]
    return [round(i * (target_layers - 1) / (layers - 1)) for i in range(layers)]


def is_heldout(row_id: str, share: float = 0.05) -> bool:
    """A fixed 5% of the training prompts, by hash of the id, for teacher-forced agreement."""
    return int(hashlib.sha256(row_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < share


@dataclass
class Example:
    ids: list[int]          # prompt + answer
    start: int              # index of the first answer token
    top_ids: list[list[int]]
    top_lp: list[list[float]]
    structured: bool


def _examples(rows: Iterable[dict], max_len: int = 1024) -> list[Example]:
    out = []
    for row in rows:
        ids = (row["prompt_ids"] + row["answer_ids"])[:max_len]
        start = len(row["prompt_ids"])
        n = len(ids) - start
        if n <= 0:
            continue
        out.append(Example(ids, start, row["top_ids"][:n], row["top_logprobs"][:n],
                           row["subcategory"] != "chat"))
    return out


def _batches(examples: list[Example], budget: int, rng: random.Random) -> list[list[Example]]:
    """Length-sorted batches of about ``budget`` padded tokens, in shuffled order."""
    order = sorted(examples, key=lambda e: len(e.ids))
    batches, cur = [], []
    for ex in order:
        if cur and len(ex.ids) * (len(cur) + 1) > budget:
            batches.append(cur)
            cur = []
        cur.append(ex)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def _collate(batch: list[Example], pad_id: int = 2):
    import torch

    width = max(len(e.ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    pos, tgt, top_ids, top_lp, structured = [], [], [], [], []
    for b, e in enumerate(batch):
        ids[b, :len(e.ids)] = torch.tensor(e.ids)
        mask[b, :len(e.ids)] = 1
        for j in range(e.start, len(e.ids)):  # hidden state at j-1 predicts answer token j
            pos.append((b, j - 1))
            tgt.append(e.ids[j])
            structured.append(e.structured)
        k = len(e.ids) - e.start
        top_ids.extend(e.top_ids[:k])
        top_lp.extend(e.top_lp[:k])
    ti = torch.tensor([(t + [t[-1]] * TOPK)[:TOPK] if t else [0] * TOPK for t in top_ids])
    tl = torch.tensor([(lp + [-1e4] * TOPK)[:TOPK] if lp else [-1e4] * TOPK for lp in top_lp])
    return ids, mask, torch.tensor(pos), torch.tensor(tgt), ti, tl, torch.tensor(structured)


def build_student(layers: int, target_dir: Path):
    """A LlamaForCausalLM with the target's config but ``layers`` layers, initialised from it."""
    import torch
    from safetensors import safe_open
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig.from_pretrained(target_dir)
    src = source_layers(layers, config.num_hidden_layers)
    config.num_hidden_layers = layers
    torch.manual_seed(0)
    student = LlamaForCausalLM(config).float()
    state = {}
    with safe_open(str(target_dir / "model.safetensors"), "pt") as f:
        state["model.embed_tokens.weight"] = f.get_tensor("model.embed_tokens.weight")
        state["model.norm.weight"] = f.get_tensor("model.norm.weight")
        for i, s in enumerate(src):
            prefix = f"model.layers.{s}."
            for key in f.keys():
                if key.startswith(prefix):
                    state[f"model.layers.{i}." + key[len(prefix):]] = f.get_tensor(key)
    missing, unexpected = student.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    student.tie_weights()
    assert student.lm_head.weight.data_ptr() == student.model.embed_tokens.weight.data_ptr()
    student.model.embed_tokens.weight.requires_grad_(False)
    return student, src


def trained_state(student) -> dict:
    """Only what training changed: the N layers and the final norm."""
    return {k: v.detach().clone() for k, v in student.state_dict().items()
            if k.startswith("model.layers.") or k == "model.norm.weight"}


def _step_loss(student, batch, kd_weight: float):
    import torch
    import torch.nn.functional as F

    ids, mask, pos, tgt, ti, tl, structured = batch
    hidden = student.model(input_ids=ids, attention_mask=mask).last_hidden_state
    h = hidden[pos[:, 0], pos[:, 1]]                          # only answer positions
    logp = F.log_softmax(h @ student.model.embed_tokens.weight.T, dim=-1)
    ce = F.nll_loss(logp, tgt)
    soft = torch.softmax(tl, dim=-1)                          # target's renormalised top-k
    kd = -(soft * logp.gather(1, ti)).sum(-1).mean()
    agree = (logp.argmax(-1) == tgt)
    return ce + kd_weight * kd, ce, kd, agree, structured


def agreement(student, examples: list[Example], budget: int = 4096) -> dict[str, float]:
    """Teacher-forced top-1 agreement with the target's greedy tokens (held-out prompts)."""
    import torch

    hits = {True: [0, 0], False: [0, 0]}
    student.eval()
    with torch.no_grad():
        for batch in _batches(examples, budget, random.Random(0)):
            _, _, _, agree, structured = _step_loss(student, _collate(batch), 0.0)
            for flag in (True, False):
                sel = structured == flag
                hits[flag][0] += int(agree[sel].sum())
                hits[flag][1] += int(sel.sum())
    student.train()
    return {"structured": hits[True][0] / max(hits[True][1], 1),
            "chat": hits[False][0] / max(hits[False][1], 1),
            "tokens": hits[True][1] + hits[False][1]}


def cmd_train(args) -> None:
    import torch
    from tqdm.auto import tqdm

    from specdec_helpers.models.resolve import resolve_model

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    folder = _mix_folder(args.n, args.seed)
    rows = load_answers(folder)
    if not rows:
        raise SystemExit(f"no answers in {folder}: run the generate step first")
    train = _examples(r for r in rows if not is_heldout(r["id"]))
    held = _examples(r for r in rows if is_heldout(r["id"]))
    n_train_tokens = sum(len(e.ids) - e.start for e in train)
    log.info("data %s: %d train answers (%d answer tokens), %d held-out answers", folder.name,
             len(train), n_train_tokens, len(held))
    target = resolve_model(TARGET)
    student, src = build_student(args.layers, target)
    params = [p for p in student.parameters() if p.requires_grad]
    n_trainable = sum(p.numel() for p in params)
    n_total = sum(p.numel() for p in student.parameters())
    log.info("student: %d layers from target layers %s; %d trainable of %d parameters",
             args.layers, src, n_trainable, n_total)
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.98), weight_decay=0.0)
    warmup = max(1, args.steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        frac = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    rng = random.Random(args.seed)
    history = [{"step": 0, **agreement(student, held)}]
    log.info("step 0 held-out agreement %s", history[-1])
    started = time.perf_counter()
    batches: list = []
    seen_tokens = 0
    bar = tqdm(range(args.steps), desc=f"train {args.layers}L", unit="step")
    step = 0
    for step in bar:
        if not batches:
            batches = _batches(train, args.batch_tokens, rng)
        batch = _collate(batches.pop())
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        loss, ce, kd, agree, _ = _step_loss(student, batch, args.kd_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        seen_tokens += len(batch[3])
        bar.set_postfix(ce=f"{ce.item():.3f}", kd=f"{kd.item():.3f}", acc=f"{agree.float().mean():.2f}",
                        tok_s=f"{seen_tokens / (time.perf_counter() - started):.0f}")
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            history.append({"step": step + 1, "train_ce": round(ce.item(), 4),
                            "minutes": round((time.perf_counter() - started) / 60, 2),
                            **agreement(student, held)})
            log.info("step %d: %s", step + 1, history[-1])
        if args.max_minutes and time.perf_counter() - started > 60 * args.max_minutes:
            log.warning("stopping at step %d: --max-minutes %.1f reached", step + 1, args.max_minutes)
            if history[-1]["step"] != step + 1:
                history.append({"step": step + 1, **agreement(student, held)})
            break
    bar.close()
    minutes = (time.perf_counter() - started) / 60
    recipe = {
        "target": TARGET, "layers": args.layers, "init_from_target_layers": src,
        "loss": f"CE on target greedy tokens + {args.kd_weight} x CE to target top-{TOPK} (renormalised)",
        "frozen": "embed_tokens (tied lm_head), copied from the target",
        "trained": "layers + final norm", "optimizer": "AdamW(0.9, 0.98), wd 0, clip 1.0",
        "lr": args.lr, "schedule": f"linear warmup {warmup} steps, cosine to 10%",
        "batch_tokens": args.batch_tokens, "steps": step + 1, "planned_steps": args.steps,
        "seed": args.seed, "threads": args.threads, "train_minutes": round(minutes, 1),
        "train_answer_tokens_seen": seen_tokens,
    }
    data = {"mix": mix_id(build_prompts(args.n, args.seed), args.seed), "prompts": len(rows),
            "train_answers": len(train), "train_answer_tokens": n_train_tokens,
            "heldout_answers": len(held), "shares": dict(MIX),
            "generator": "recipes.distill_drafts.mix.build_prompts", "answers": "target, vLLM greedy fp32"}
    export_draft(args.layers, student, n_trainable, n_total, recipe, data, history)


def export_draft(layers: int, student, n_trainable: int, n_total: int, recipe: dict, data: dict,
                 history: list[dict]) -> Path:
    """Write data/drafts/<key>.safetensors (bf16, trained tensors only) and its manifest entry."""
    import torch
    from safetensors.torch import save_file

    from specdec_helpers.models.model_cache import sha256_of

    key = draft_key(layers)
    DRAFTS_DIR.mkdir(parents=True, exist_ok=True)
    path = DRAFTS_DIR / f"{key}.safetensors"
    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in trained_state(student).items()}
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata={"key": key, "layers": str(layers)})
    os.replace(tmp, path)
    os.chmod(path, 0o644)
    manifest = read_manifest()
    entry = manifest["drafts"].get(key, {})
    entry.update({
        "file": path.name, "sha256": sha256_of(path), "bytes": path.stat().st_size,
        "dtype": "bfloat16", "layers": layers, "trained_parameters": n_trainable,
        "total_parameters": n_total, "recipe": recipe, "data": data,
        "heldout_agreement": history,
    })
    entry.pop("measured", None)  # new weights: old vLLM measurements no longer apply
    manifest["drafts"][key] = entry
    write_manifest(manifest)
    log.info("wrote %s (%.1f MB, sha256 %s)", path, path.stat().st_size / 1e6, entry["sha256"][:12])
    return path


def read_manifest() -> dict:
    path = DRAFTS_DIR / "manifest.json"
    if path.exists():
        return json.loads(path.read_text())
    return {"target": TARGET, "note": "written by python -m recipes.distill_drafts", "drafts": {}}


def write_manifest(manifest: dict) -> None:
    path = DRAFTS_DIR / "manifest.json"
    manifest["drafts"] = dict(sorted(manifest["drafts"].items(), key=lambda kv: kv[1].get("layers", 0)))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, path)


# --- 4. Measuring the drafts with vLLM (greedy, k speculative tokens) ------------------------

def _run_set(server, prompts, workers: int = 32) -> dict[str, tuple[str, int]]:
    """All ``prompts`` at once (greedy, each with its own max_tokens): id -> (text, tokens)."""
    from concurrent.futures import ThreadPoolExecutor

    client = server.client()

    def one(p):
        r = client.chat.completions.create(model=server.served_model_name, messages=p.messages,
                                           max_tokens=p.max_tokens, temperature=0.0, seed=0)
        return p.id, (r.choices[0].message.content, r.usage.completion_tokens)

    with ThreadPoolExecutor(workers) as pool:
        return dict(pool.map(one, prompts))


def _step_time(server, prompts, tokens: int = 64) -> float:
    """Median inter-token latency of single requests that generate exactly ``tokens`` tokens."""
    from statistics import median

    from specdec_helpers.measure.requests import stream_chat, warm_up

    warm_up(server)
    itls = [stream_chat(server.client(), server.served_model_name, p.messages, max_tokens=tokens,
                        temperature=0.0, extra_body={"ignore_eos": True}).mean_itl_s
            for p in prompts for _ in range(2)]
    return median(itls)


def cmd_evaluate(args) -> None:
    """For each depth: first-position / overall acceptance and mean acceptance length on the full
    structured and creative sets, c, and greedy outputs compared with the baseline's."""
    from specdec_helpers.engine.install import vllm_install
    from specdec_helpers.engine.serving import VLLMServer
    from specdec_helpers.engine.spec_config import draft_model_config
    from specdec_helpers.measure.metrics import read_spec_counters
    from specdec_helpers.measure.prompts import load_prompt_sets
    from specdec_helpers.models.drafts import provision_draft
    from specdec_helpers.models.resolve import resolve_model

    target = resolve_model(TARGET)
    sets = {cls: load_prompt_sets([cls]) for cls in ("structured", "creative")}
    speed_prompts = sets["structured"][:2] + sets["creative"][:1]
    common = dict(log_dir=args.log_dir, max_model_len=1024, dtype="float32")
    started = time.perf_counter()
    with VLLMServer(target, name="baseline", **common) as base:
        base_out = {cls: _run_set(base, ps) for cls, ps in sets.items()}
        target_itl = _step_time(base, speed_prompts)
    log.info("baseline: %.1f ms per decode step", 1000 * target_itl)
    manifest = read_manifest()
    for layers in args.layers:
        key = draft_key(layers)
        draft_dir = provision_draft(key)
        with VLLMServer(draft_dir, name=f"{key}-alone", **common) as alone:
            draft_itl = _step_time(alone, speed_prompts)
        result: dict[str, Any] = {
            "conditions": (f"vllm-cpu {vllm_install().version}, float32, greedy, "
                           f"num_speculative_tokens={args.k}, full data/prompts sets sent "
                           "concurrently per class, 2-core CPU shared with other jobs"),
            "k": args.k, "target_step_ms": round(1000 * target_itl, 2),
            "draft_step_ms": round(1000 * draft_itl, 2), "c": round(draft_itl / target_itl, 3),
        }
        identical = total = 0
        mismatched = []
        spec_config = draft_model_config(draft_dir, args.k)
        with VLLMServer(target, name=f"{key}-spec", speculative_config=spec_config, **common) as spec:
            for cls, ps in sets.items():
                before = read_spec_counters(spec.base_url)
                out = _run_set(spec, ps)
                c = read_spec_counters(spec.base_url) - before
                result[cls] = {
                    "first_position_rate": round(c.per_position_rate[0], 4),
                    "per_position_rate": [round(x, 4) for x in c.per_position_rate],
                    "acceptance_rate": round(c.acceptance_rate, 4),
                    "mean_acceptance_length": round(c.mean_acceptance_length, 3),
                    "drafts": int(c.drafts), "prompts": len(ps),
                }
                for pid, got in out.items():
                    total += 1
                    if got == base_out[cls][pid]:
                        identical += 1
                    else:
                        mismatched.append(pid)
        result["lossless"] = {"identical_outputs": identical, "prompts": total,
                              "mismatched": mismatched}
        log.info("%s: %s", key, json.dumps(result))
        manifest["drafts"][key]["measured"] = result
        write_manifest(manifest)
    log.info("evaluation took %.0f s", time.perf_counter() - started)


# --- CLI -------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m recipes.distill_drafts",
        description="Distil SmolLM2-shaped drafts (N layers) from SmolLM2-135M-Instruct on its "
                    "own greedy answers. Steps: prompts -> generate -> train -> evaluate.")
    parser.add_argument("--n", type=int, default=5000, help="prompts in the mix (default 5000)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--log-file", help="also log to this file")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("prompts", help="write the training prompt mix to the cache (checks disjointness)")
    g = sub.add_parser("generate", help="the target's greedy answers with vLLM (resumable)")
    g.add_argument("--limit", type=int, default=0, help="answer at most this many more prompts")
    g.add_argument("--batch", type=int, default=128, help="max concurrent sequences in vLLM")
    g.add_argument("--chunk", type=int, default=128, help="prompts per saved chunk")
    g.add_argument("--kv-gib", type=int, default=2)
    t = sub.add_parser("train", help="train one draft depth and write data/drafts/")
    t.add_argument("--layers", type=int, required=True)
    t.add_argument("--steps", type=int, default=480)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--batch-tokens", type=int, default=1024, help="padded tokens per batch")
    t.add_argument("--kd-weight", type=float, default=0.5)
    t.add_argument("--eval-every", type=int, default=120)
    t.add_argument("--max-minutes", type=float, default=0, help="stop early after this long")
    t.add_argument("--threads", type=int, default=1)
    e = sub.add_parser("evaluate", help="vLLM: acceptance, c and losslessness; into the manifest")
    e.add_argument("--layers", type=int, nargs="+", default=[1, 2, 4])
    e.add_argument("--k", type=int, default=4)
    e.add_argument("--log-dir", default="/tmp/specdec-distill-logs")
    args = parser.parse_args(argv)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if args.log_file:
        handlers.append(logging.FileHandler(args.log_file))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", handlers=handlers)
    {"prompts": cmd_prompts, "generate": cmd_generate, "train": cmd_train,
     "evaluate": cmd_evaluate}[args.command](args)


if __name__ == "__main__":
    main()
