"""A Hugging Face GPT-1 folder's own tokenizer (vocab.json + merges.txt: lower case, "</w>" word ends) travels with
the loaded model (tokenizer_for), and every view reads it: the ids and labels, the logits, generation's text, the Why
page, the notebook, the graph CLI and the Copy-as-Python snippets agree with transformers' OpenAIGPTTokenizer and
OpenAIGPTLMHeadModel on the same folder. A vocabulary of another size than the embedding is refused; the neuron index
is built over GPT-1's own ids (tests/index/test_index_gpt1.py); GPT-2-vocabulary models keep tiktoken's encoding."""

from __future__ import annotations

import html
import json
import shutil

import pytest
import torch

from gptviz import get_tokenizer, load_pretrained, tokenizer_for
from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.app.display import MEAN_HEAD
from gptviz.model.gpt1_tokenizer import OpenAIGPTTokenizer
from gptviz.model.tokenizer import token_labels
from gptviz.model.weights import CheckpointError
from gptviz.serve import model_access
from gptviz.serve.limits import ServerLimits
from tests.support.gpt1 import GPT1, PROMPT, gpt1_folder, hf_ids, hf_labels

pytestmark = [pytest.mark.slow, pytest.mark.hf]


@pytest.fixture(scope="module")
def gpt1(tmp_path_factory) -> GPT1:
    return gpt1_folder(tmp_path_factory.mktemp("ops") / "openai-gpt")


def one_token_word(gpt1: GPT1) -> tuple[str, int]:
    """A word of the prompt that GPT-1's tokenizer reads as one token, and its id."""
    for word in PROMPT.replace(",", " ").split():
        ids = hf_ids(gpt1, word)
        if len(ids) == 1 and len(hf_ids(gpt1, " " + word)) == 1:
            return word, ids[0]
    raise AssertionError("no word of the prompt is one token")


@pytest.fixture
def spec(gpt1, monkeypatch) -> model_service.ModelSpec:
    """The folder as the app's "Folder or Hub id" loads it (inside the server's model folders)."""
    limits = ServerLimits.from_env({"GPTVIZ_MODEL_DIRS": str(gpt1.folder.parent)})
    monkeypatch.setattr(model_access, "server_limits", lambda: limits)
    yield model_service.ModelSpec(K.SOURCE_PRETRAINED, str(gpt1.folder), "post")
    model_service.model_store().clear()


def test_the_model_reads_its_own_tokenizer_and_its_logits_are_transformers(gpt1):
    model = load_pretrained(str(gpt1.folder))
    enc = tokenizer_for(model)
    assert isinstance(enc, OpenAIGPTTokenizer) and enc.n_vocab == model.config.vocab_size == len(gpt1.tok)
    ids = hf_ids(gpt1)
    assert enc.encode(PROMPT) == ids and len(ids) > 10
    assert "<unk>" in hf_labels(gpt1, ids) and "light␣" in hf_labels(gpt1, ids) and "s" in hf_labels(gpt1, ids)
    assert token_labels(ids, enc) == hf_labels(gpt1, ids)
    assert enc.decode(ids) == gpt1.tok.decode(ids)
    with torch.no_grad():
        torch.testing.assert_close(
            model(torch.tensor([ids]))[0], gpt1.hf(torch.tensor([ids])).logits[0], atol=1e-4, rtol=1e-4
        )


def test_gpt2_vocabulary_models_keep_tiktoken(gpt1, tmp_path):
    assert tokenizer_for(load_pretrained("shakespeare-pre")) is get_tokenizer()
    assert tokenizer_for(None) is get_tokenizer()
    bare = tmp_path / "no-tokenizer"  # a GPT-1 folder without its tokenizer files reads GPT-2's ids, as before
    shutil.copytree(gpt1.folder, bare)
    for name in ("vocab.json", "merges.txt"):
        (bare / name).unlink()
    assert tokenizer_for(load_pretrained(str(bare))) is get_tokenizer()


def test_a_vocabulary_of_another_size_than_the_embedding_is_refused(gpt1, tmp_path):
    other = tmp_path / "mismatch"
    shutil.copytree(gpt1.folder, other)
    vocab = json.loads((other / "vocab.json").read_text())
    vocab["zzzz</w>"] = len(vocab)
    (other / "vocab.json").write_text(json.dumps(vocab))
    with pytest.raises(
        CheckpointError, match=f"has {len(vocab):,} ids but the model's token embedding has {len(vocab) - 1:,} rows"
    ):
        load_pretrained(str(other))


def test_generation_decodes_as_transformers_does(gpt1):
    from gptviz import generate, stream

    model = load_pretrained(str(gpt1.folder))
    ids = hf_ids(gpt1)
    out = generate(model, ids, 8, temperature=0.0)
    with torch.no_grad():
        ref = gpt1.hf.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, pad_token_id=0)[0].tolist()
    assert out == ref
    assert tokenizer_for(model).decode(out) == gpt1.tok.decode(out)
    steps = list(stream(model, ids, 4, temperature=0.0))
    assert [s.piece for s in steps] == hf_labels(gpt1, out[len(ids) : len(ids) + 4])


def test_the_attention_page_shows_gpt1s_tokens_and_its_snippet_reads_them(gpt1, spec):
    from tests.support.pagetest import attention_map, run_page
    from tests.support.snippets import run_snippet, snippet_of

    ids = hf_ids(gpt1)
    at = run_page("attention", PROMPT, spec)
    assert not at.exception and not at.error, (at.exception, at.error)
    chips = [c.replace("\\", "").rstrip("\u200b") for c in at.button_group(key=K.ATT_QUERY).options]
    assert chips == hf_labels(gpt1, ids)
    data, drawn = attention_map(at)
    assert data["col_labels"] == hf_labels(gpt1, ids)
    code = snippet_of(at)
    assert f"ids = tokenizer_for(model).encode({PROMPT!r})" in code
    result = run_snippet(code)
    with torch.no_grad():
        want = gpt1.hf(torch.tensor([ids]), output_attentions=True).attentions
    layer, head = at.session_state[K.ATT_LAYER], at.session_state[K.ATT_HEAD]
    want = want[layer][0].mean(0) if head == MEAN_HEAD else want[layer][0, head]
    torch.testing.assert_close(torch.as_tensor(result["map"]), want, atol=1e-5, rtol=1e-4)


def test_the_generation_page_writes_gpt1s_text(gpt1, spec):
    from tests.support.pagetest import generate_in, generation_of, run_page
    from tests.support.snippets import snippet_of

    at = run_page("generation", PROMPT, spec)
    assert not at.exception and not at.error, (at.exception, at.error)
    namespace: dict = {}
    exec(compile(snippet_of(at), "<copied snippet>", "exec"), namespace)  # noqa: S102 (the page's own code)
    assert namespace["ids"] == hf_ids(gpt1)  # its prompt line reads GPT-1's tokenizer: tokenizer_for(model)
    at = generate_in(at, 6, temperature=0.0)
    assert not at.exception and not at.error
    job = generation_of(at)
    ids = hf_ids(gpt1)
    assert list(job.prompt) == ids
    written = ids + [s.token_id for s in job.steps]
    assert len(written) == len(ids) + 6
    assert gpt1.tok.decode(written) in [c.value for c in at.code]  # the text, the prompt's end spaced from the new


def test_the_why_page_asks_about_gpt1s_tokens(gpt1, spec):
    from gptviz.app.services import why as services
    from tests.support.pagetest import run_page

    ids = hf_ids(gpt1)
    at = run_page("why", PROMPT, spec)
    assert not at.exception and not at.error, (at.exception, at.error)
    with torch.no_grad():
        probs = gpt1.hf(torch.tensor([ids])).logits[0, -1].softmax(-1)
    target = at.selectbox(key=K.WHY_TARGET)
    assert target.value == int(probs.argmax())
    label = hf_labels(gpt1, [target.value])[0]
    assert target.options[target.index] == f"{label}  ({float(probs[target.value]):.1%})"
    model = model_service.load_model(spec)
    enc = tokenizer_for(model)
    assert list(services.prompt_ids(PROMPT, model.config, enc)) == ids  # typed prompts (patching's) too
    clean = PROMPT.partition(". ")[0]  # "<unk>" (the prompt's "thou") decodes to text that encodes otherwise
    swapped = services.corrupted_from(clean, model.config, enc)
    assert swapped is not None
    changed = hf_ids(gpt1, swapped[0])
    assert (
        len(changed) == len(hf_ids(gpt1, clean))
        and sum(a != b for a, b in zip(changed, hf_ids(gpt1, clean), strict=True)) == 1
    )


def test_the_notebook_and_the_graph_cli_take_gpt1_text(gpt1, tmp_path):
    from gptviz.__main__ import main
    from gptviz.notebook.figures import one_token
    from gptviz.notebook.graph import graph_figures

    model = load_pretrained(str(gpt1.folder))
    ids = hf_ids(gpt1)
    word, word_id = one_token_word(gpt1)
    graph, _ = graph_figures(model, PROMPT, word, max_nodes=20)
    assert graph.prompt_ids == ids and graph.target == word_id
    assert one_token(word, model.config.vocab_size, tokenizer_for(model)) == word_id  # attribution's target
    with pytest.raises(ValueError, match="tokens, not one \\(openai-gpt's pieces\\)"):
        one_token(PROMPT, model.config.vocab_size, tokenizer_for(model))
    out = tmp_path / "g.json"
    assert (
        main(
            [
                "graph",
                "--model",
                str(gpt1.folder),
                "--prompt",
                PROMPT,
                "--target",
                word,
                "--max-nodes",
                "20",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads(out.read_text())
    assert data["prompt_ids"] == ids and data["target"] == word_id
    assert data["tokens"] == [t.replace("␣", " ") for t in hf_labels(gpt1, ids)]
    assert (
        main(
            [
                "qk",
                "--model",
                str(gpt1.folder),
                "--prompt",
                PROMPT,
                "--layer",
                "1",
                "--head",
                "0",
                "--query",
                str(len(ids) - 1),
                "--key",
                "0",
                "--out",
                str(tmp_path / "q.json"),
            ]
        )
        == 0
    )


def test_the_neuron_index_is_built_over_gpt1s_own_ids(gpt1, spec, tmp_path, monkeypatch):
    """The complete works read with GPT-1's BPE (tests/index/test_index_gpt1.py checks a corpus of one's own, the scan
    and the readers); the unit page offers a build, no refusal."""
    from gptviz import index as ix
    from gptviz.__main__ import main
    from gptviz.training.corpus import WORKS, play_files
    from tests.support.pagetest import run_page

    monkeypatch.setenv("GPTVIZ_INDEX_DIR", str(tmp_path / "indexes"))
    assert main(["index", str(gpt1.folder), "--max-tokens", "100", "--out", str(tmp_path / "ix")]) == 0
    index = ix.load_index(tmp_path / "ix")
    docs = ix.index_documents(index, enc=tokenizer_for(load_pretrained(str(gpt1.folder))))
    first = play_files(WORKS)[0].read_text(encoding="utf-8")
    assert index.meta["tokenizer"]["name"] == "openai-gpt" and list(map(int, docs[0].ids)) == hf_ids(gpt1, first)[:100]
    at = run_page("units", PROMPT, spec)
    assert not at.exception and not at.error
    assert not any("no neuron index:" in w.value for w in at.warning)
    assert [b for b in at.button if b.key == K.UNIT_BUILD]


def test_the_embeddings_and_activations_pages_label_gpt1s_tokens(gpt1, spec):
    from tests.support.pagetest import figure, run_page

    labels = hf_labels(gpt1, hf_ids(gpt1))
    at = run_page("embeddings", PROMPT, spec)
    assert not at.exception and not at.error, (at.exception, at.error)
    shown = figure(at, "Cosine similarity of the prompt's token embeddings")["data"][0]["x"]
    # drawn as text: "<unk>" escaped, a repeat with zero-width spaces (its own column)
    assert [html.unescape(x).rstrip("\u200b") for x in shown] == labels
    at = run_page("activations", PROMPT, spec)
    assert not at.exception and not at.error, (at.exception, at.error)
    shown = figure(at, "Residual-stream norm per layer and position")["data"][0]["x"]
    assert [html.unescape(x).rstrip("\u200b") for x in shown] == labels
    lens = figure(at, "Logit lens: the top next token")["data"][0]
    assert [html.unescape(x) for x in lens["x"]] == [f"{i}:{label}" for i, label in enumerate(labels)]


def test_the_sidebars_folder_field_loads_gpt1_and_the_attention_page_shows_its_tokens(gpt1, spec):
    from gptviz.app import settings as S
    from tests.support.pagetest import open_app

    at = open_app(
        **{K.MODEL_SOURCE: K.SOURCE_PRETRAINED, S.HF_NAME.key: str(gpt1.folder), S.NORM.key: "post", K.PROMPT: PROMPT}
    )
    assert not at.exception and not at.error, (at.exception, at.error)
    assert at.session_state[K.MODEL_SPEC] == spec
    chips = [c.replace("\\", "").rstrip("\u200b") for c in at.button_group(key=K.ATT_QUERY).options]
    assert chips == hf_labels(gpt1, hf_ids(gpt1))


def test_the_why_pages_graph_is_over_gpt1s_ids_and_labels(gpt1, spec):
    from gptviz.app import settings as S
    from gptviz.methods.graph import attribution_graph
    from tests.support.pagetest import figure, run_page, title_of
    from tests.support.snippets import snippet_of

    ids = hf_ids(gpt1)
    at = run_page("why", PROMPT, spec, **{S.WHY_VIEW.key: K.WHY_GRAPH_VIEW})
    assert not at.exception and not at.error, (at.exception, at.error)
    target, other = at.session_state[K.WHY_TARGET], at.session_state[K.WHY_OTHER]
    graph = attribution_graph(load_pretrained(str(gpt1.folder)), ids, target, other)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Metric, unedited"] == f"{graph.real_metric:+.3f}"
    t, last = hf_labels(gpt1, [target, ids[-1]])
    assert html.unescape(title_of(figure(at, "Why "))) == f"Why '{t}' after '{last}'"
    namespace: dict = {}
    exec(compile(snippet_of(at, "attribution graph"), "<copied snippet>", "exec"), namespace)  # noqa: S102
    assert namespace["ids"] == ids and namespace["result"].real_metric == pytest.approx(graph.real_metric, abs=1e-5)
