"""GPT-2's tokenizer as a Hugging Face `PreTrainedTokenizerFast`, built from gptviz's bundled BPE file (no network).
(GPT-1's own tokenizer, read from an openai-gpt folder, is the model's: gptviz.model.gpt1_tokenizer.)

TransformerLens's TransformerBridge needs a Hugging Face tokenizer; without one it downloads "gpt2"'s. This gives
the same 50,257 ids offline: the vocabulary is the bundled ranks in byte-level form, and the merges are recovered
from the ranks (each multi-byte token is the merge of the two parts that BPE, stopped just before its rank, leaves).
"""

from __future__ import annotations

import functools

from ..model.tokenizer import EOT, EOT_ID, _load_ranks


@functools.cache
def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in character for each byte (the byte-level BPE alphabet)."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def _split_at_rank(ranks: dict[bytes, int], token: bytes, rank: int) -> tuple[bytes, bytes]:
    """The two parts BPE joins to make `token`: merge byte pairs by rank, stopping before `rank`."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        best, best_rank = None, None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < rank and (best_rank is None or r < best_rank):
                best, best_rank = i, r
        if best is None:
            break
        parts[best : best + 2] = [parts[best] + parts[best + 1]]
    if len(parts) != 2:
        raise ValueError(f"token {token!r} is not the merge of two tokens of lower rank")
    return parts[0], parts[1]


@functools.cache
def gpt2_hf_tokenizer():
    """A `transformers.PreTrainedTokenizerFast` equal to GPT-2's (same ids for every text), built offline.
    Needs `tokenizers` and `transformers` (the `transformer-lens` extra brings both)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    ranks = _load_ranks()
    to_unicode = _byte_to_unicode()
    spell = lambda b: "".join(to_unicode[x] for x in b)  # noqa: E731
    vocab = {spell(token): rank for token, rank in ranks.items()}
    merges = [
        tuple(map(spell, _split_at_rank(ranks, token, rank)))
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1])
        if len(token) > 1
    ]
    vocab[EOT] = EOT_ID
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.add_special_tokens([EOT])
    # add_bos_token and name_or_path as a Hub tokenizer has them: TransformerLens reloads a tokenizer by its
    # name to switch BOS on unless it is on already
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=EOT,
        eos_token=EOT,
        unk_token=EOT,
        model_max_length=1024,
        add_bos_token=True,
        name_or_path="gpt2",
    )


# ---- GPT-1's own tokenizer (Hugging Face openai-gpt folders) -------------------------------------------------------
