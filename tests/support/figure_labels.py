"""Token labels that test how much room a figure leaves."""

from __future__ import annotations

LABELS = [
    "R",
    "ome",
    "o",
    ".",
    "↵",
    "But",
    "␣soft",
    "!",
    "␣what",
    "␣light",
    "␣through",
    "␣y",
    "onder",
    "␣window",
    "␣breaks",
    "?",
    "↵",
    "It",
    "␣is",
    "␣the",
    "␣east",
    ",",
    "␣and",
    "␣Juliet",
    "␣is",
    "␣the",
    "␣sun",
    "!",
]
