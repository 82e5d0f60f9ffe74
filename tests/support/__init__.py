"""What the tests share that is not a fixture (conftest.py holds those): small models, page and browser helpers,
reference computations. ROOT is the checkout."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
