"""Interpretability methods: attribution, patching and ablation (interventions), flow, head_steps, wiring
(pre vs post) are modules here (xiong, the paper check, trains and lives in gptviz.training); the package re-exports
the derived views below.

Derived views of a capture, one job per module: head detectors (detectors), the bigram baseline (baseline), norm
statistics (norms), the logit lens (lens), MLP neurons (neurons), embedding geometry (geometry), the explainers'
curves (curves) and attention entropy (entropy), and heads of two models matched by role (matching); the attribution
graph and the QK decomposition of issue 58 (graph, graph_qk; graph_export writes their JSON; graph_contributors:
its node influences alone, for a line under each written token). Every public name is
importable from here, as before the split;
StepSummary and step_summary live with generation (gptviz.model.generate) and are re-exported too."""

from __future__ import annotations

from ..model.generate import StepSummary, step_summary
from .baseline import bigram_baseline
from .curves import activation_curves, causal_mask, regions_where
from .detectors import (
    InductionTest,
    duplicate_token_chance,
    duplicate_token_scores,
    head_ranking,
    induction_chance,
    induction_queries,
    induction_scores,
    induction_scores_from,
    induction_sequence,
    induction_test,
    previous_token_chance,
    previous_token_scores,
    prompt_induction_chance,
    prompt_induction_scores,
    uniform_attention_chance,
)
from .entropy import attention_entropy, uniform_attention_entropy
from .geometry import PCA, cosine_similarity_matrix, pca, vocab_sample
from .graph import AttributionGraph, GraphEdge, GraphNode, attribution_graph
from .graph_contributors import Contributors, top_contributors
from .graph_export import graph_json, qk_json
from .graph_qk import QKDecomposition, qk_decomposition
from .lens import LogitLens, lens_logits, logit_lens
from .matching import HeadMatch, match_heads, pattern_similarity
from .neurons import activation_histograms, top_neurons
from .norms import NormStats, branch_norms, norm_input_stats, norm_inputs, residual_norms

__all__ = [
    "AttributionGraph",
    "Contributors",
    "GraphEdge",
    "GraphNode",
    "QKDecomposition",
    "attribution_graph",
    "graph_json",
    "qk_decomposition",
    "qk_json",
    "top_contributors",
    "HeadMatch",
    "InductionTest",
    "LogitLens",
    "NormStats",
    "PCA",
    "StepSummary",
    "activation_curves",
    "activation_histograms",
    "attention_entropy",
    "bigram_baseline",
    "branch_norms",
    "causal_mask",
    "cosine_similarity_matrix",
    "duplicate_token_chance",
    "duplicate_token_scores",
    "head_ranking",
    "induction_chance",
    "induction_queries",
    "induction_scores",
    "induction_scores_from",
    "induction_sequence",
    "induction_test",
    "lens_logits",
    "logit_lens",
    "match_heads",
    "norm_input_stats",
    "norm_inputs",
    "pattern_similarity",
    "pca",
    "previous_token_chance",
    "previous_token_scores",
    "prompt_induction_chance",
    "prompt_induction_scores",
    "regions_where",
    "residual_norms",
    "step_summary",
    "top_neurons",
    "uniform_attention_chance",
    "uniform_attention_entropy",
    "vocab_sample",
]
