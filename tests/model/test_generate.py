"""Generation: greedy, top-k / top-p masks, seeds, setting errors, KV cache parity, the context limit,
per-step attention rows, stopping at end-of-text."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from benchmarks.bench_sampling import sorted_nucleus  # the full sort nucleus_mask replaced
from gptviz import capture, generate, stream
from gptviz.model.generate import _sample, check_sampling, nucleus_mask, sampling_distribution
from gptviz.model.tokenizer import EOT_ID, get_tokenizer, token_label
from tests.support.models import SMALL, build, random_ids

N_CTX = SMALL.n_ctx
PROBS = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05])
LOGITS = PROBS.log() + 3.0  # softmax(LOGITS) == PROBS; the shift shows only differences matter


def mask(*ids, n=5):
    out = torch.zeros(n, dtype=torch.bool)
    out[list(ids)] = True
    return out


# ---------------------------------------------------------------- the distribution and its masks


def test_temperature_one_gives_softmax_and_all_allowed():
    probs, allowed = sampling_distribution(LOGITS, 1.0)
    torch.testing.assert_close(probs, PROBS)
    assert allowed.all()


def test_temperature_rescales_logits():
    probs, _ = sampling_distribution(LOGITS, 2.0)
    expected = PROBS.sqrt() / PROBS.sqrt().sum()  # p ** (1 / T), renormalised
    torch.testing.assert_close(probs, expected)
    cold, _ = sampling_distribution(LOGITS, 0.25)
    torch.testing.assert_close(cold, PROBS**4 / (PROBS**4).sum())


def test_temperature_zero_allows_only_the_argmax():
    probs, allowed = sampling_distribution(torch.tensor([0.1, 2.0, -1.0, 1.9]), 0)
    assert torch.equal(allowed, mask(1, n=4))
    torch.testing.assert_close(probs, torch.softmax(torch.tensor([0.1, 2.0, -1.0, 1.9]), -1))


@pytest.mark.parametrize("top_k, expected", [(1, [0]), (2, [0, 1]), (4, [0, 1, 2, 3]), (5, range(5)), (50, range(5))])
def test_top_k_mask(top_k, expected):
    probs, allowed = sampling_distribution(LOGITS, 1.0, top_k=top_k)
    assert torch.equal(allowed, mask(*expected))
    torch.testing.assert_close(probs, PROBS)  # probabilities are reported before masking


@pytest.mark.parametrize(
    "top_p, expected",
    [
        (0.45, [0]),  # the top token alone already reaches 0.45
        (0.55, [0, 1]),  # 0.5 < 0.55, so the second is needed
        (0.75, [0, 1, 2]),  # 0.7 < 0.75
        (0.9, [0, 1, 2, 3]),  # 0.85 < 0.9
        (1.0, [0, 1, 2, 3, 4]),
    ],
)
def test_top_p_mask(top_p, expected):
    _, allowed = sampling_distribution(LOGITS, 1.0, top_p=top_p)
    assert torch.equal(allowed, mask(*expected))


def test_top_k_then_top_p_renormalises_over_the_top_k():
    # Alone, top_p=0.55 keeps two tokens. After top_k=3 the kept mass is 0.85 and the first token holds
    # 0.5 / 0.85 = 0.588 of it, which already reaches 0.55: one token.
    _, alone = sampling_distribution(LOGITS, 1.0, top_p=0.55)
    _, both = sampling_distribution(LOGITS, 1.0, top_k=3, top_p=0.55)
    assert torch.equal(alone, mask(0, 1)) and torch.equal(both, mask(0))
    _, both = sampling_distribution(LOGITS, 1.0, top_k=3, top_p=0.6)  # 0.588 < 0.6: the second joins
    assert torch.equal(both, mask(0, 1))
    _, both = sampling_distribution(LOGITS, 1.0, top_k=2, top_p=0.99)
    assert torch.equal(both, mask(0, 1))


@pytest.mark.parametrize("temperature", [1e-10, 1e-40, 1e-300, 5e-324])
def test_a_tiny_temperature_is_the_argmax_not_nan(temperature):
    """logits / 1e-40 overflows to +-inf and softmax of inf - inf is NaN (top-p then raised on it); the limit of
    softmax(logits / t) as t -> 0 is the argmax, which is what a tiny temperature must give."""
    for top_p in (None, 0.9):
        probs, allowed = sampling_distribution(LOGITS, temperature, top_p=top_p)
        assert not torch.isnan(probs).any()
        assert torch.equal(probs, F.one_hot(LOGITS.argmax(), LOGITS.numel()).float())
        assert torch.equal(allowed, mask(int(LOGITS.argmax()))) if top_p else bool(allowed.all())


def test_top_p_after_temperature():
    _, allowed = sampling_distribution(LOGITS, 0.25, top_p=0.9)  # cold: the top token holds ~0.98
    assert torch.equal(allowed, mask(0))


@pytest.mark.parametrize("scale", [0.01, 0.5, 2.0, 4.0, 8.0, 30.0])  # near-uniform to near one-hot
@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.99, 0.999999])
def test_nucleus_by_a_growing_prefix_equals_the_full_sort(scale, top_p):
    g = torch.Generator().manual_seed(int(scale * 100))
    for _ in range(5):
        logits = torch.randn(50257, generator=g) * scale  # GPT-2's vocabulary size: every prefix size is taken
        probs = torch.softmax(logits, 0)
        got = nucleus_mask(probs, top_p)
        assert torch.equal(got, sorted_nucleus(probs, top_p))
        kept = probs[got].double()
        assert kept.sum() >= top_p - 1e-5 and got.sum() >= 1  # float32 running sums: within 1e-5
        # the smallest such set: without its least probable member it falls short of top_p
        assert kept.sum() - kept.min() < top_p + 1e-5


def test_nucleus_with_zeros_left_by_top_k():
    probs = torch.zeros(50257)
    probs[[7, 70, 700]] = torch.tensor([0.5, 0.3, 0.2])
    assert torch.equal(nucleus_mask(probs, 0.9), mask(7, 70, 700, n=50257))
    assert torch.equal(nucleus_mask(probs, 0.5), mask(7, n=50257))


def test_sampling_draws_only_allowed_tokens_in_proportion():
    probs, allowed = sampling_distribution(LOGITS, 1.0, top_k=3)
    g = torch.Generator().manual_seed(0)
    draws = torch.tensor([_sample(probs, allowed, False, g) for _ in range(3000)])
    counts = torch.bincount(draws, minlength=5).float() / len(draws)
    assert counts[3] == 0 and counts[4] == 0
    torch.testing.assert_close(counts[:3], PROBS[:3] / PROBS[:3].sum(), atol=0.04, rtol=0)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(temperature=-0.1), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(temperature=float("inf")), "temperature"),
        (dict(temperature=True), "temperature"),
        (dict(temperature="1"), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_p=-0.2), "top_p"),
        (dict(top_p=True), "top_p"),
        (dict(top_p=float("nan")), "top_p"),
        (dict(top_k=0), "top_k"),
        (dict(top_k=-3), "top_k"),
        (dict(top_k=2.5), "top_k"),
        (dict(top_k=True), "top_k"),
        (dict(max_new_tokens=-1), "max_new_tokens"),
        (dict(max_new_tokens=2.0), "max_new_tokens"),
    ],
)
def test_bad_settings_raise_value_error_naming_them(model, kwargs, name):
    with pytest.raises(ValueError, match=f"^{name} must"):
        generate(model, [1, 2], **{"max_new_tokens": 2, **kwargs})
    with pytest.raises(ValueError, match=f"^{name} must"):
        stream(model, [1, 2], **{"max_new_tokens": 2, **kwargs})  # raised at the call, before iterating


def test_check_sampling_accepts_edges():
    check_sampling(0, 1, 1.0, 0)
    check_sampling(0.0, None, None)
    check_sampling(2, 50257, 1e-9)


def test_bad_prompts(model):
    with pytest.raises(ValueError, match="no tokens"):
        stream(model, [])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        generate(model, [1, SMALL.vocab_size])
    assert generate(model, [1, 2], max_new_tokens=0) == [1, 2]
    with pytest.raises(ValueError, match="one sequence"):
        generate(model, torch.tensor([[1, 2], [3, 4]]))  # two prompts are not one long one
    assert generate(model, torch.tensor([[1, 2]]), 3, temperature=0) == generate(model, [1, 2], 3, temperature=0)


# ---------------------------------------------------------------- generation on a model


def test_greedy_equals_argmax_recomputation(model):
    prompt = [3, 1, 4, 1, 5]
    out = generate(model, prompt, max_new_tokens=8, temperature=0)
    assert out[:5] == prompt and len(out) == 13
    with torch.no_grad():
        for k in range(5, 13):
            assert out[k] == int(model(torch.tensor(out[:k]))[0, -1].argmax())


def test_top_k_one_is_greedy_at_any_temperature(model):
    greedy = generate(model, [7, 8], max_new_tokens=10, temperature=0)
    assert generate(model, [7, 8], max_new_tokens=10, temperature=1.5, top_k=1, seed=3) == greedy


@pytest.fixture
def flat_model():
    """All logits zero: every next token equally likely, so sampling is visible."""
    m = build(tie_weights=False)
    with torch.no_grad():
        m.lm_head.weight.zero_()
    return m


def test_same_seed_same_text_other_seed_differs(flat_model):
    a = generate(flat_model, [1], max_new_tokens=12, temperature=1.0, seed=123)
    b = generate(flat_model, torch.tensor([1]), max_new_tokens=12, temperature=1.0, seed=123)
    c = generate(flat_model, [1], max_new_tokens=12, temperature=1.0, seed=124)
    assert a == b
    assert a != c
    assert len(set(a[1:])) > 6  # a flat distribution really was sampled
    record = next(stream(flat_model, [1], max_new_tokens=1, seed=0))
    torch.testing.assert_close(record.probs, torch.full((SMALL.vocab_size,), 1 / SMALL.vocab_size))


def test_seeded_sampling_does_not_touch_global_rng(flat_model):
    torch.manual_seed(5)
    before = torch.rand(1)
    torch.manual_seed(5)
    generate(flat_model, [1], max_new_tokens=4, seed=9)
    assert torch.equal(torch.rand(1), before)


def test_records_describe_each_step(model):
    records = list(stream(model, [5, 6, 7], max_new_tokens=4, temperature=0))
    enc = get_tokenizer()
    assert [r.step for r in records] == [0, 1, 2, 3]
    assert [r.position for r in records] == [3, 4, 5, 6]
    for r in records:
        assert r.logits.shape == r.probs.shape == r.allowed.shape == (SMALL.vocab_size,)
        assert r.token_id == int(r.logits.argmax()) and r.allowed.sum() == 1 and r.allowed[r.token_id]
        assert r.piece == token_label(enc.decode_single_token_bytes(r.token_id))
        assert r.attention is None and not r.context_shifted and r.window_start == 0
        top = r.top(3)
        assert top[0] == (r.token_id, pytest.approx(float(r.probs.max())), True)
        assert [p for _, p, _ in top] == sorted((p for _, p, _ in top), reverse=True)
        assert [a for _, _, a in top] == [True, False, False]


def test_kv_cache_matches_recomputation(model):
    prompt = random_ids(4, seed=8).tolist()
    cached = list(stream(model, prompt, max_new_tokens=10, temperature=0))
    plain = list(stream(model, prompt, max_new_tokens=10, temperature=0, use_cache=False))
    assert [r.token_id for r in cached] == [r.token_id for r in plain]
    for a, b in zip(cached, plain, strict=True):
        torch.testing.assert_close(a.logits, b.logits, atol=1e-4, rtol=0)
    assert generate(model, prompt, 10, temperature=0) == generate(model, prompt, 10, temperature=0, use_cache=False)


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("prompt_len", [N_CTX - 3, N_CTX, N_CTX + 5])
def test_generating_past_the_context_shifts_the_window(model, use_cache, prompt_len):
    prompt = random_ids(prompt_len, seed=9).tolist()
    records = list(stream(model, prompt, max_new_tokens=8, temperature=0, use_cache=use_cache))
    assert len(records) == 8
    seq = list(prompt)
    for r in records:
        assert r.position == len(seq)
        assert r.context_shifted == (len(seq) > N_CTX)
        assert r.window_start == max(0, len(seq) - N_CTX)
        with torch.no_grad():  # the model saw exactly the last n_ctx tokens
            expected = model(torch.tensor(seq[r.window_start :]))[0, -1]
        torch.testing.assert_close(r.logits, expected, atol=1e-4, rtol=0)
        seq.append(r.token_id)
    assert any(r.context_shifted for r in records)


def test_attention_rows_match_capture(model):
    prompt = random_ids(5, seed=10).tolist()
    records = list(stream(model, prompt, max_new_tokens=N_CTX, temperature=0, attention=True))  # runs past n_ctx
    seq = list(prompt)
    for r in records:
        keys = len(seq) - r.window_start
        assert r.attention.shape == (SMALL.n_layers, SMALL.n_heads, keys)
        torch.testing.assert_close(r.attention.sum(-1), torch.ones(SMALL.n_layers, SMALL.n_heads), atol=1e-5, rtol=0)
        _, cache = capture(model, seq[r.window_start :], lambda n: n.endswith("hook_pattern"))
        torch.testing.assert_close(r.attention, cache.patterns()[:, 0, :, -1, :], atol=1e-5, rtol=0)
        seq.append(r.token_id)
    assert records[-1].context_shifted


def test_attention_does_not_change_tokens(model):
    prompt = [9, 8, 7]
    with_rows = [r.token_id for r in stream(model, prompt, 6, temperature=0, attention=True)]
    assert with_rows == generate(model, prompt, 6, temperature=0)[3:]


@pytest.fixture
def eot_model():
    """A full-vocabulary model whose greedy choice is always <|endoftext|>."""
    cfg = SMALL.replace(vocab_size=50257, d_model=16, n_heads=2, n_layers=1, tie_weights=False)
    m = build(cfg)
    with torch.no_grad():
        m.ln_f.weight.zero_()
        m.ln_f.bias.fill_(1.0)  # the final norm outputs the all-ones vector
        m.lm_head.weight.zero_()
        m.lm_head.weight[EOT_ID] = 1.0  # so only <|endoftext|> scores (16 vs 0)
    return m


def test_stop_at_eos(eot_model):
    stopped = list(stream(eot_model, [15496], max_new_tokens=10, temperature=0, stop_at_eos=True))
    assert [r.token_id for r in stopped] == [EOT_ID]
    assert stopped[0].piece == "<|endoftext|>"
    assert generate(eot_model, [15496], 10, temperature=0, stop_at_eos=True) == [15496, EOT_ID]
    assert len(list(stream(eot_model, [15496], max_new_tokens=10, temperature=0))) == 10
    sampled = generate(eot_model, [15496], 10, temperature=1.0, seed=0, stop_at_eos=True)
    assert sampled[-1] == EOT_ID and len(sampled) <= 11
    p_eot = float(next(stream(eot_model, [1], 1, temperature=1.0)).probs[EOT_ID])
    assert p_eot == pytest.approx(1 / (1 + 50256 * math.exp(-16)), rel=1e-4)  # logits 16 vs 0
