"""The LayerNorm toggle on a random preset copies its twin's weights instead of drawing them again: the result is
the model a fresh build gives, tensor for tensor (values, layout, tying), and it runs the other wiring."""

from __future__ import annotations

import torch

from gptviz import GPT
from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.model.config import PRESETS
from gptviz.model.model import rewired_copy


def same_tensors(a: GPT, b: GPT) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) and sa[k].stride() == sb[k].stride() for k in sa)


def test_a_rewired_copy_is_the_other_wirings_fresh_build_and_computes_it():
    for config in (PRESETS["tiny"], PRESETS["tiny"].replace(tie_weights=False)):
        pre = GPT(config.replace(norm="pre"), seed=4).eval()
        post = rewired_copy(pre, "post")
        drawn = GPT(config.replace(norm="post"), seed=4).eval()
        assert post.config == drawn.config and not post.training
        assert same_tensors(post, drawn)
        assert (post.lm_head.weight is post.wte.weight) == config.tie_weights
        ids = torch.tensor([[1, 5, 9, 2]])
        assert torch.equal(post(ids), drawn(ids))
        assert not torch.allclose(post(ids), pre(ids))  # the wiring did change
        assert post.wte.weight.data_ptr() != pre.wte.weight.data_ptr()  # a copy: nothing shared with the twin


def test_a_half_precision_twin_gives_the_half_precision_build():
    pre = GPT(PRESETS["tiny"], seed=1).to(torch.float16)
    post = rewired_copy(pre, "post")
    assert same_tensors(post, GPT(PRESETS["tiny"].replace(norm="post"), seed=1).to(torch.float16))


def test_the_toggle_copies_a_built_twin_and_builds_when_there_is_none(monkeypatch):
    drawn = []
    real_build = model_service._build_model
    monkeypatch.setattr(model_service, "_build_model", lambda spec, folder=None: drawn.append(spec) or real_build(spec))
    pre = model_service.ModelSpec(K.SOURCE_PRESET, "tiny", "pre", seed=91)
    post = pre._replace(norm="post")
    built_pre = model_service.load_model(pre)
    built_post = model_service.load_model(post)
    assert drawn == [pre]  # the post model was not drawn
    assert same_tensors(built_post, GPT(PRESETS["tiny"].replace(norm="post"), seed=91).eval())
    assert built_post.config.norm == "post" and built_pre.config.norm == "pre"
    other_seed = post._replace(seed=92)
    model_service.load_model(other_seed)  # no twin built for this seed: drawn as before
    assert drawn == [pre, other_seed]
