"""Kernel-name rules: each name's match is remembered per rule set, so one set's answer never reaches another."""

import pandas as pd

from tracelens.model.classify import DEFAULT_RULES, match_names, user_rules


def test_a_user_pattern_changes_the_answer_for_a_name_already_matched():
    names = pd.Categorical(["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "my_p2p_copy", "gemm", None])
    kinds, rules = match_names(names, DEFAULT_RULES)
    # DEFAULT_RULES: the NCCL kernel by its "nccl-name" rule; the others match no rule.
    assert kinds.tolist() == ["nccl", None, None, None]
    assert rules.tolist() == ["nccl-name", None, None, None]
    kinds, rules = match_names(names, DEFAULT_RULES + user_rules(["p2p_copy"]))
    assert kinds.tolist() == ["nccl", "user", None, None]
    assert rules.tolist() == ["nccl-name", "user-pattern", None, None]
    kinds, _ = match_names(names, DEFAULT_RULES)          # and back: the user rule stays with its own set
    assert kinds.tolist() == ["nccl", None, None, None]
