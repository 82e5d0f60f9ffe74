"""Training text: a single file, or a folder of plays split into training and held-out plays, as GPT-2 BPE ids.

Whole plays are held out rather than the tail of a file, so the validation text is one the model has never seen a
passage of (Tiny Shakespeare's passages come from several of the complete works' plays, so it is no held-out set)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..model.tokenizer import get_tokenizer

# The corpora: `data/` beside the package in a checkout; installed, setuptools maps it to `gptviz/corpora`.
_HERE = Path(__file__).resolve().parents[1]
DATA = _HERE / "corpora" if (_HERE / "corpora").is_dir() else _HERE.parent / "data"
WORKS = DATA / "shakespeare-works"
CORPUS = DATA / "tinyshakespeare.txt"  # the Train page's text
# Three whole plays the bundled models never train on: a tragedy, a comedy and a Roman play (about 106K tokens).
HELD_OUT_PLAYS = ("julius_caesar", "macbeth", "twelfth_night")
END_OF_TEXT = 50256  # GPT-2's <|endoftext|>, written between plays so no window reads one play into the next


@dataclass(frozen=True)
class Corpus:
    """Token ids to train on and to validate on, and where they came from (for model cards)."""

    train: torch.Tensor
    val: torch.Tensor
    source: str
    train_parts: tuple[str, ...] = ()
    val_parts: tuple[str, ...] = ()

    @property
    def train_vocab(self) -> torch.Tensor:
        """Sorted ids that occur in the training text."""
        return torch.unique(self.train)


def play_files(folder: str | Path = WORKS) -> list[Path]:
    """The folder's plays and poems (`*_gut.txt`, or every `*.txt` where there are none), sorted by name."""
    folder = Path(folder)
    files = sorted(folder.glob("*_gut.txt")) or sorted(folder.glob("*.txt"))
    if not files:
        raise ValueError(f"no .txt files in {folder}")
    return files


def play_name(path: Path) -> str:
    return path.name.removesuffix(".txt").removesuffix("_gut")


def encode_texts(paths: list[Path]) -> torch.Tensor:
    """The files' ids, each followed by <|endoftext|>."""
    enc = get_tokenizer()
    ids: list[int] = []
    for path in paths:
        ids += enc.encode(path.read_text(encoding="utf-8")) + [END_OF_TEXT]
    return torch.tensor(ids, dtype=torch.long)


def load_plays(folder: str | Path = WORKS, held_out: tuple[str, ...] = HELD_OUT_PLAYS) -> Corpus:
    """Train on every play in `folder` except `held_out` (names as in `play_name`), validate on those."""
    files = play_files(folder)
    names = [play_name(p) for p in files]
    unknown = sorted(set(held_out) - set(names))
    if unknown:
        raise ValueError(f"held-out play(s) not in {Path(folder).name}: {', '.join(unknown)}")
    train = [p for p, n in zip(files, names, strict=True) if n not in held_out]
    val = [p for p, n in zip(files, names, strict=True) if n in held_out]
    if not train or not val:
        raise ValueError("need at least one training play and one held-out play")
    return Corpus(
        encode_texts(train),
        encode_texts(val),
        Path(folder).name,
        tuple(play_name(p) for p in train),
        tuple(play_name(p) for p in val),
    )


def load_corpus(path: str | Path = CORPUS) -> torch.Tensor:
    """One text file as GPT-2 BPE ids (int64)."""
    text = Path(path).read_text(encoding="utf-8")
    if not text.strip():
        raise ValueError(f"{path} is empty")
    return torch.tensor(get_tokenizer().encode(text), dtype=torch.long)


def split(tokens: torch.Tensor, val_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The first (1 - val_fraction) of the tokens trains, the rest validates (no overlap)."""
    cut = int(len(tokens) * (1 - val_fraction))
    return tokens[:cut], tokens[cut:]


def load_file_split(path: str | Path, val_fraction: float) -> Corpus:
    """One text file: the first (1 - val_fraction) trains, the rest validates."""
    return Corpus(*split(load_corpus(path), val_fraction), Path(path).name)


def load_training_data(
    path: str | Path = WORKS, val_fraction: float = 0.1, held_out: tuple[str, ...] = HELD_OUT_PLAYS
) -> Corpus:
    """A folder of plays (held out by play) or a single file (held out by its tail)."""
    path = Path(path)
    return load_plays(path, held_out) if path.is_dir() else load_file_split(path, val_fraction)
