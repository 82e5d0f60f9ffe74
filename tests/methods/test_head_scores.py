"""Head detectors on hand-built attention patterns: each score counts exactly the queries it names, and each
has a chance level (uniform attention over the allowed keys) to read it against."""

from __future__ import annotations

import pytest
import torch

from gptviz import methods as analysis


def uniform_pattern(T: int) -> torch.Tensor:
    """[1, 1, T, T]: every query spreads evenly over keys 0..q."""
    return (torch.ones(T, T).tril() / torch.arange(1, T + 1)[:, None])[None, None]


def test_induction_score_counts_only_queries_with_an_earlier_copy():
    n = 5  # [r1..r5, r1..r5]: queries 5..9 have an earlier copy at q - 5; the induction key is q - 4
    T = 2 * n
    pattern = torch.zeros(1, 1, T, T)
    pattern[0, 0, 0, 0] = 1.0
    for q in range(1, T):
        pattern[0, 0, q, q] = 1.0  # by default each query looks at itself
    for q in range(n, T):
        pattern[0, 0, q] = 0.0
        pattern[0, 0, q, q - n + 1] = 1.0  # a perfect induction head on the second half
    assert analysis.induction_scores_from(pattern, n).item() == pytest.approx(1.0)
    # The last query of the first half (4) attending to key 0 is the old off-by-one: it has no earlier copy,
    # so moving its weight onto key 0 must not change the score...
    pattern[0, 0, n - 1] = 0.0
    pattern[0, 0, n - 1, 0] = 1.0
    assert analysis.induction_scores_from(pattern, n).item() == pytest.approx(1.0)
    # ...while taking one second-half query off its induction key costs exactly 1/n.
    pattern[0, 0, T - 1] = 0.0
    pattern[0, 0, T - 1, T - 1] = 1.0
    assert analysis.induction_scores_from(pattern, n).item() == pytest.approx(1 - 1 / n)


def test_chance_levels_are_what_uniform_attention_scores():
    T = 12
    uniform = uniform_pattern(T)
    assert analysis.previous_token_scores(uniform).item() == pytest.approx(analysis.previous_token_chance(T))
    assert analysis.previous_token_chance(T) == pytest.approx(sum(1 / (q + 1) for q in range(1, T)) / (T - 1))
    n = T // 2
    assert analysis.induction_scores_from(uniform, n).item() == pytest.approx(analysis.induction_chance(n))
    assert analysis.induction_chance(n) == pytest.approx(sum(1 / (q + 1) for q in range(n, 2 * n)) / n)
    ids = [7, 3, 7, 9, 3, 7, 1, 2, 2, 5, 7, 0]
    assert analysis.duplicate_token_scores(uniform[0], ids).item() == pytest.approx(
        analysis.duplicate_token_chance(ids)
    )
    # by hand: q=2 (one 7 before, 1/3), q=4 (one 3, 1/5), q=5 (two 7s, 2/6), q=8 (one 2, 1/9), q=10 (three 7s, 3/11)
    assert analysis.duplicate_token_chance(ids) == pytest.approx((1 / 3 + 1 / 5 + 2 / 6 + 1 / 9 + 3 / 11) / 5)
    assert analysis.duplicate_token_chance([1, 2, 3]) == 0.0


def test_induction_sequence_draws_from_the_given_ids():
    pool = torch.tensor([11, 500, 7000, 31000])
    seq = analysis.induction_sequence(50257, 40, seed=2, ids=pool)
    assert len(seq) == 80 and torch.equal(seq[:40], seq[40:]) and set(seq.tolist()) <= set(pool.tolist())
    assert torch.equal(seq, analysis.induction_sequence(50257, 40, seed=2, ids=pool))
    plain = analysis.induction_sequence(50257, 40, seed=2)
    assert ((plain >= 1000) & (plain < 20000)).all()


def test_induction_sequence_on_a_small_vocabulary_uses_every_id():
    """Below the common range [1000, 20000) it draws from the whole vocabulary: it once drew id 100 only,
    a constant sequence on which every head scored at chance, whatever the model had learned."""
    seq = analysis.induction_sequence(101, 16, seed=3)
    assert ((seq >= 0) & (seq < 101)).all() and len(set(seq[:16].tolist())) > 8


def test_vocab_sample_from_given_ids():
    pool = torch.arange(100, 400, 3)
    sample = analysis.vocab_sample(50257, 50, seed=1, ids=pool)
    assert len(sample) == 50 and len(set(sample.tolist())) == 50 and set(sample.tolist()) <= set(pool.tolist())
    assert torch.equal(sample, sample.sort().values)
    assert len(analysis.vocab_sample(50257, 5000, ids=pool)) == len(pool)


def test_induction_test_loss_is_the_repeated_halfs_own_next_token_loss():
    from tests.support.models import SMALL, build

    model = build(SMALL.replace(n_ctx=20))
    pool = torch.arange(SMALL.vocab_size)
    test = analysis.induction_test(model, 10, seed=3, ids=pool)
    seq = analysis.induction_sequence(SMALL.vocab_size, 10, 3, ids=pool)
    assert len(set(seq.tolist())) > 5
    with torch.no_grad():
        logits = model(seq[None])[0]
    manual = torch.nn.functional.cross_entropy(logits[10:19], seq[11:20])
    assert test.repeat_loss == pytest.approx(float(manual), rel=1e-5)
    assert test.chance == pytest.approx(analysis.induction_chance(10)) and test.length == 10
    with pytest.raises(ValueError, match="does not fit"):
        analysis.induction_test(model, 11)


def test_induction_on_the_prompt_itself_finds_the_token_after_each_earlier_copy():
    ids = [4, 8, 6, 4, 8, 6, 1]  # queries 3, 4, 5 have earlier copies; their induction keys are 1, 2, 3
    T = len(ids)
    perfect = torch.zeros(1, 1, T, T)
    for q in range(T):
        perfect[0, 0, q, q] = 1.0
    for q, key in ((3, 1), (4, 2), (5, 3)):
        perfect[0, 0, q] = 0.0
        perfect[0, 0, q, key] = 1.0
    assert analysis.prompt_induction_scores(perfect, ids).item() == pytest.approx(1.0)
    # a previous-token head scores only where the previous token is the one after the copy: never here
    previous = torch.zeros(1, 1, T, T)
    previous[0, 0, 0, 0] = 1.0
    for q in range(1, T):
        previous[0, 0, q, q - 1] = 1.0
    assert analysis.prompt_induction_scores(previous, ids).item() == pytest.approx(0.0)
    uniform = uniform_pattern(T)
    assert analysis.prompt_induction_scores(uniform, ids).item() == pytest.approx(analysis.prompt_induction_chance(ids))
    assert analysis.prompt_induction_chance(ids) == pytest.approx((1 / 4 + 1 / 5 + 1 / 6) / 3)
    assert analysis.prompt_induction_chance([1, 2, 3]) == 0.0
    assert analysis.prompt_induction_scores(uniform_pattern(3), [1, 2, 3]).item() == 0.0
