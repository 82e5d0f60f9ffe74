"""Training text: whole plays held out, <|endoftext|> between plays, a single file split by its tail."""

from __future__ import annotations

import pytest
import torch

from gptviz.model.tokenizer import get_tokenizer
from gptviz.training.corpus import END_OF_TEXT, HELD_OUT_PLAYS, WORKS, load_plays, load_training_data, play_files


def write_plays(folder, texts: dict[str, str]):
    folder.mkdir()
    for name, text in texts.items():
        (folder / f"{name}_gut.txt").write_text(text, encoding="utf-8")
    return folder


def test_whole_plays_are_held_out_and_separated(tmp_path):
    folder = write_plays(
        tmp_path / "works",
        {"alpha": "Ham.\nWho's there?", "beta": "Hor.\nFriends.", "gamma": "Ber.\nLong live the king!"},
    )
    corpus = load_plays(folder, held_out=("beta",))
    enc = get_tokenizer()
    expected_train = (
        enc.encode("Ham.\nWho's there?") + [END_OF_TEXT] + enc.encode("Ber.\nLong live the king!") + [END_OF_TEXT]
    )
    assert corpus.train.tolist() == expected_train
    assert corpus.val.tolist() == enc.encode("Hor.\nFriends.") + [END_OF_TEXT]
    assert corpus.train_parts == ("alpha", "gamma") and corpus.val_parts == ("beta",)
    assert torch.equal(corpus.train_vocab, torch.unique(torch.tensor(expected_train)))
    with pytest.raises(ValueError, match="not in works: delta"):
        load_plays(folder, held_out=("delta",))
    with pytest.raises(ValueError, match="at least one training play"):
        load_plays(folder, held_out=("alpha", "beta", "gamma"))


def test_a_single_file_is_split_by_its_tail(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("Hello, I am" * 10)
    corpus = load_training_data(path, val_fraction=0.2)
    ids = get_tokenizer().encode("Hello, I am" * 10)
    cut = int(len(ids) * 0.8)
    assert corpus.train.tolist() == ids[:cut] and corpus.val.tolist() == ids[cut:]
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(ValueError, match="empty"):
        load_training_data(tmp_path / "empty.txt", 0.1)


def test_the_bundled_works_hold_out_three_plays():
    names = [p.name for p in play_files(WORKS)]
    assert len(names) == 39 and all(f"{play}_gut.txt" in names for play in HELD_OUT_PLAYS)
