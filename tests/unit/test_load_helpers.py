"""Task E's helpers for notebooks 06 and 07: the crossover in words, the steady-state window of
the step-time measurement, the batch sizes the cost model needs, and documents sized in tokens
with a real tokenizer. Pure functions; the last test loads only SmolLM2's tokenizer."""

from __future__ import annotations

import pytest

from specdec_helpers.measure.load import Crossover, batch_sizes_for, find_crossover
from specdec_helpers.measure.prompts import long_document_for_tokens
from specdec_helpers.models.tokenizer import chat_token_counter


# ----------------------------------------------------------------------------- the crossover
def test_crossover_where_speculation_stops_paying():
    cross = find_crossover({4: 0.8, 1: 1.3, 2: 1.05})
    assert (cross.status, cross.level, cross.last_paying) == ("stops", 4, 2)
    assert cross.sentence() == ("Speculation stops paying between 2 and 4 concurrent streams "
                                "(it paid at 2, not at 4)")
    assert find_crossover({1: 1.3, 2: 0.9}).sentence() == \
        "Speculation stops paying at 2 concurrent streams (it paid at 1)"


def test_crossover_never_paid_names_no_crossover():
    cross = find_crossover({1: 0.9, 2: 0.8, 4: 0.5})
    assert (cross.status, cross.level) == ("never", None)
    text = cross.sentence()
    assert "never paid at any level" in text and "1-4 concurrent streams" in text
    assert "stops paying" not in text


def test_crossover_always_paid_and_single_level():
    cross = find_crossover({1: 1.4, 8: 1.1})
    assert (cross.status, cross.level, cross.last_paying) == ("always", None, 8)
    assert "still paid at every level" in cross.sentence() and "up to 8" in cross.sentence()
    assert find_crossover({1: 0.7}).sentence() == "Speculation never paid at any level measured (1 concurrent stream)"


def test_crossover_mixed_and_threshold():
    cross = find_crossover({1: 0.95, 2: 1.1, 4: 0.8})
    assert (cross.status, cross.level, cross.last_paying) == ("mixed", None, 2)
    assert "no clean crossover" in cross.sentence()
    # exactly the threshold does not pay (as verdict.decision_side: 1 + min_gain is "a gain too small");
    # a higher threshold moves the crossover
    assert find_crossover({1: 1.01, 2: 1.0}).level == 2
    assert find_crossover({1: 1.05, 2: 1.2}, threshold=1.05).status == "mixed"
    assert find_crossover({1: 1.1, 2: 1.03}, threshold=1.05).level == 2
    with pytest.raises(ValueError):
        find_crossover({})


def test_crossover_first_loss_after_a_gain_even_when_noisy():
    # paid at 1, lost at 2, paid again at 4 (noise), lost at 8: the crossover is the first loss
    cross = find_crossover({1: 1.2, 2: 0.97, 4: 1.01, 8: 0.6})
    assert (cross.level, cross.last_paying) == (2, 1)
    assert isinstance(cross, Crossover)


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
