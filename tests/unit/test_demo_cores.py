"""ServerPair's core split behind notebook 05 and the demo: real VLLMServer objects of the cpu-tiny target, not
started (placing them on cores is decided before any start)."""

from __future__ import annotations

import pytest

from specdec_helpers.demo import ServerPair, split_cores
from specdec_helpers.engine.cpu import usable_core_ids
from specdec_helpers.engine.spec_config import draft_model_config


@pytest.mark.parametrize("split", [True, False])
def test_own_cores_only_when_the_pair_is_split_over_different_cores(target_dir, tmp_path, split):
    pair = ServerPair(target_dir, draft_model_config(target_dir, 2), split_cpu_cores=split, log_dir=tmp_path)
    binds = [s.cpu_threads_bind for s in pair.servers]
    can_split = len(usable_core_ids()) >= 2
    assert pair.own_cores is (split and can_split)
    if pair.own_cores:  # disjoint halves of this process's cores, each server its own
        assert binds == split_cores(2) and binds[0] != binds[1]
        assert "--speculative-config" in " ".join(pair.speculative.command())
    assert pair.comparison(False).startswith("one after the other")
    assert ("confounded" in pair.comparison(True)) is (not pair.own_cores)
    assert not pair.running  # nothing was started
