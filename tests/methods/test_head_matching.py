"""Heads of two models matched by what they do (gptviz.methods.matching)."""

from __future__ import annotations

import pytest
import torch

from gptviz import capture, load_pretrained
from gptviz import methods as analysis
from gptviz.model.hooks import act_name


def test_a_permutation_of_the_heads_is_recovered_exactly():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(3, 4, 12, 12, generator=g).tril().softmax(-1)
    order = torch.randperm(12, generator=g)
    b = a.flatten(0, 1)[order].view(3, 4, 12, 12)  # B's head k is A's head order[k]
    matches = analysis.match_heads(a, b)
    assert len(matches) == 12 and len({m.b for m in matches}) == 12  # one to one
    for m in matches:
        k = m.b[0] * 4 + m.b[1]
        assert divmod(int(order[k]), 4) == m.a and m.similarity == pytest.approx(1.0)


def test_patterns_from_different_probes_are_refused():
    with pytest.raises(ValueError, match="same probe"):
        analysis.match_heads(torch.rand(1, 2, 5, 5), torch.rand(1, 2, 6, 6))


def probe_patterns(model, seq):
    _, cache = capture(model, seq[None], [act_name("pattern", i) for i in range(model.config.n_layers)])
    return torch.stack([cache[act_name("pattern", i)][0] for i in range(model.config.n_layers)])


def test_the_bundled_twins_previous_token_and_induction_heads_match_each_other():
    """The twins grew their heads in different places (pre: previous-token in layer 0, induction in layer 1; post:
    layers 1 and 2). Matched by pattern, each role finds its own kind in the other model."""
    pre, post = load_pretrained("shakespeare-pre"), load_pretrained("shakespeare-post")
    length = 50
    seq = analysis.induction_sequence(pre.config.vocab_size, length)
    pats = {"pre": probe_patterns(pre, seq), "post": probe_patterns(post, seq)}
    prev = {k: analysis.previous_token_scores(p) for k, p in pats.items()}
    ind = {k: analysis.induction_scores_from(p, length) for k, p in pats.items()}
    matches = analysis.match_heads(pats["pre"], pats["post"])
    roles = 0
    for m in matches:
        if prev["pre"][m.a] > 0.5:
            assert prev["post"][m.b] > 0.5, m
            roles += 1
        if ind["pre"][m.a] > 0.3:
            assert ind["post"][m.b] > 0.3, m
            roles += 1
    assert roles >= 4  # two previous-token and four induction heads in pre
    assert {m.a[0] for m in matches if ind["pre"][m.a] > 0.3} != {m.b[0] for m in matches if ind["pre"][m.a] > 0.3}
