"""The Embeddings page's computations on the model's weights: the learned positions' similarity and a PCA of the
token embeddings (results cache; the weights are the loaded model's, nothing new is allocated beyond the result)."""

from __future__ import annotations

from ... import methods as analysis
from .. import model_service
from . import cached


@cached
def position_similarity(spec: model_service.ModelSpec):
    """[n_ctx, n_ctx] cosine similarity of every learned position embedding (model.wpe.weight)."""
    wpe = model_service.load_model(spec).wpe.weight.detach().float().cpu()
    return analysis.cosine_similarity_matrix(wpe).numpy()


@cached
def embedding_pca(spec: model_service.ModelSpec, prompt_ids: tuple[int, ...], n_sample: int):
    """PCA of the token-embedding rows of a vocabulary sample plus the prompt's distinct tokens."""
    wte = model_service.load_model(spec).wte.weight.detach().float().cpu()
    drawn = analysis.vocab_sample(wte.shape[0], n_sample, seed=0, ids=model_service.training_vocab(spec))
    sample = [i for i in drawn.tolist() if i not in prompt_ids]
    rows = sample + list(prompt_ids)
    fit = analysis.pca(wte[rows], k=2)
    return sample, fit.coords.numpy(), fit.explained_variance_ratio.tolist()
