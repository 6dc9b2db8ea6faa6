"""Task E's helpers for notebooks 06 and 07 (06's crossover rule is tested from the notebook, test_notebook_rules):
the steady-state window of the step-time measurement, the batch sizes the cost model needs, and documents sized in tokens
with a real tokenizer. Pure functions; the last test loads only SmolLM2's tokenizer."""

from __future__ import annotations

from specdec_helpers.measure.load import batch_sizes_for
from specdec_helpers.measure.prompts import long_document_for_tokens
from specdec_helpers.models.tokenizer import chat_token_counter


# ----------------------------------------------------------------------------- t(n) measurement
def test_batch_sizes_for_plain_and_verify_steps():
    assert batch_sizes_for([1, 2, 4], k=4) == [1, 2, 4, 5, 10, 20]
    assert batch_sizes_for([1, 4], k=2) == [1, 3, 4, 12]
    assert batch_sizes_for([1, 64], k=4, largest=256) == [1, 5, 64, 256]


# ----------------------------------------------------------------------------- documents in tokens
def test_document_sized_with_the_real_tokenizer_fits_and_is_close():
    from specdec_helpers.models.resolve import resolve_model

    count = chat_token_counter(resolve_model("smollm2-135m-instruct"))
    for target in (256, 1000, 2016):
        doc = long_document_for_tokens(target, count, task="quote")
        assert doc.tokens == count(doc.messages) <= target
        assert doc.tokens > target - 80  # within about one record (~45 tokens) of the target
    # the old parameter's failure: 64 records were about 2,900 tokens, over a 2048-token window
    from specdec_helpers.measure.prompts import long_document_prompt

    assert count(long_document_prompt(64)[0]) > 2048
