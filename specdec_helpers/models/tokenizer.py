"""The one tokenizer loader and prompt-token counter, counting as vLLM does: chat messages through the chat
template, a completions prompt (a string) with the special tokens, token ids as they are."""

from __future__ import annotations

import logging
import os
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@lru_cache(maxsize=16)
def load_tokenizer(source: str | os.PathLike, local_only: bool = False) -> PreTrainedTokenizerBase:
    """A model folder's or hub id's tokenizer, loaded once per process (``local_only``: no network)."""
    from transformers import AutoTokenizer

    logging.getLogger("transformers").setLevel(logging.ERROR)
    return AutoTokenizer.from_pretrained(str(source), local_files_only=local_only)


def chat_messages(prompt: Any) -> list[dict] | None:
    """The messages of a chat prompt (a list of message dicts, or a ``Prompt``); None for other prompts."""
    messages = getattr(prompt, "messages", None)
    if messages is None and isinstance(prompt, (list, tuple)) and prompt and all(isinstance(m, dict) for m in prompt):
        messages = prompt
    return None if messages is None else list(messages)


def is_token_ids(prompt: Any) -> bool:
    return isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt)


def count_tokens(tokenizer: Any, prompt: Any, chat_template_kwargs: dict | None = None) -> int:
    """Prompt tokens as vLLM counts them: chat messages, a ``Prompt``, a text prompt or token ids."""
    messages = chat_messages(prompt)
    if messages is not None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the model's tokenizer has no chat template; vLLM's chat endpoint would refuse it")
        ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                            **(chat_template_kwargs or {}))
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids)  # transformers 5: a BatchEncoding
    if isinstance(prompt, str):
        return len(tokenizer(prompt)["input_ids"])
    if is_token_ids(prompt):
        return len(prompt)
    raise TypeError(f"cannot measure a prompt of type {type(prompt).__name__}: pass chat messages, a Prompt, "
                    "a string or a list of token ids")


def chat_token_counter(model_dir: str | os.PathLike,
                       chat_template_kwargs: dict | None = None) -> Callable[[list[dict]], int]:
    """Counts chat messages with the model's own tokenizer and template, as the server will."""
    tokenizer = load_tokenizer(str(model_dir))
    return lambda messages: count_tokens(tokenizer, list(messages), chat_template_kwargs)
