"""Issue 43: ablating L2H0 (direct attribution +0.89 toward the newline) raised P(newline), with nothing on screen
saying why. The ablation now shows the heads' direct effect and the total effect it measured side by side, both
recomputed here from the library."""

from __future__ import annotations

import pytest
import torch

from gptviz.methods import attribution
from gptviz.methods.interventions import ablate_heads, run_with_edits
from gptviz.model.tokenizer import encode
from tests.support.why_page import PROMPT, page, tiny_model, top_two

HEADS = [(0, 1), (1, 2)]


def expected_effects():
    ids = encode(PROMPT)
    target, other = top_two(ids)
    dla = attribution.direct_logit_attribution(tiny_model(), torch.tensor([ids]), target, other)
    direct = -float(dla.head_values[0, 1] + dla.head_values[1, 2])
    logits, _ = run_with_edits(tiny_model(), torch.tensor([ids]), [ablate_heads(0, [1]), ablate_heads(1, [2])])
    total = float(logits[0, -1, target] - logits[0, -1, other]) - dla.logit_diff
    return direct, total


@pytest.mark.slow
@pytest.mark.parametrize("view", ["Ablate heads", "Direct attribution"])
def test_ablation_shows_the_direct_and_the_total_effect_side_by_side(view):
    at = page(why_view=view, why_heads=HEADS, why_n=4)
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    direct, total = expected_effects()
    assert metrics["Direct effect on the metric"] == f"{direct:+.3f}"
    assert float(metrics["Total effect (ablation, measured)"]) == pytest.approx(total, abs=2e-3)
    assert any(c.value.startswith("They can differ, even in sign") for c in at.caption)


def test_mean_ablation_says_the_comparison_is_for_zero_ablation():
    at = page(why_view="Ablate heads", why_heads=HEADS, why_n=4, why_mode="mean")
    assert not at.exception
    assert "Direct effect on the metric" not in {m.label for m in at.metric}
    assert any("compared for zero ablation" in c.value for c in at.caption)


def test_mean_ablation_sets_each_heads_output_to_its_own_mean_over_the_prompt():
    """The page's mean ablation equals the hand computation: head h's z at every position replaced by head h's z
    averaged over this prompt's positions. (When the shared capture had no batch axis, passed as it was, the mean ran
    over positions and heads together and the page showed other probabilities; Copy as Python found it.)"""
    from gptviz.app.services import why
    from gptviz.methods.interventions import Edit
    from gptviz.model.hooks import act_name, capture
    from tests.support.pagetest import TINY

    spec, model = TINY, tiny_model()
    ids = tuple(encode(PROMPT))
    _, cache = capture(model, torch.tensor([ids]), [act_name("z", 1)])
    means = cache[act_name("z", 1)][0].mean(0)  # [heads, d_head]: each head's own mean

    def by_hand(z, offset):
        z = z.clone()
        z[:, :, [0, 2]] = means[[0, 2]]
        return z

    logits, _ = capture(model, torch.tensor([ids]), [], edits=[Edit(act_name("z", 1), by_hand, "by hand")])
    wanted = logits[0, -1].softmax(-1)
    got = why.next_token(spec, ids, ((1, 0), (1, 2)), "mean")
    torch.testing.assert_close(got, wanted, rtol=1e-5, atol=1e-7)
