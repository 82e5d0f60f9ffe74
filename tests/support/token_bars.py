"""The Generation page's next-token bars, built for a test with the sampled token one of the bars drawn."""

from __future__ import annotations

from gptviz.figures import generation as fg


def bars_sampling(ids, probs, kept, labels: list[str], sampled: int, **rest):
    """fg.next_token_bars with the bar at index `sampled` as the sampled token: its id, rank, probability and label
    are that bar's. `rest`: n_allowed, kept_mass and the other keywords."""
    return fg.next_token_bars(
        ids,
        probs,
        kept,
        labels,
        sampled_id=ids[sampled],
        sampled_rank=sampled + 1,
        sampled_prob=probs[sampled],
        sampled_label=labels[sampled],
        **rest,
    )
