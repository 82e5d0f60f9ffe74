"""The Why page's prompt and the tiny model it runs."""

from __future__ import annotations

import torch

from gptviz.app import model_service
from gptviz.methods.interventions import run_with_edits
from tests.support.pagetest import TINY, run_page

PROMPT = "Romeo.\nBut soft! what light through yonder window breaks?"


def page(**state):
    return run_page("why", PROMPT, **state)


def tiny_model():
    return model_service.load_model(TINY)


def top_two(ids):
    logits, _ = run_with_edits(tiny_model(), torch.tensor([ids]), [])
    top = logits[0, -1].topk(2).indices
    return int(top[0]), int(top[1])
