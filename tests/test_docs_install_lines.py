"""Every `pip install` line in the README and docs/ (Markdown and notebooks) works from a checkout (issue 62): gptviz
is on no registry, so `pip install "gptviz[notebook]"` fails; the target is the checkout (`.`, `".[extras]"`), a
requirements file that exists, or a package pinned as requirements.txt pins it (torch's CPU build), and every extra
named is one of pyproject.toml's optional-dependencies."""

from __future__ import annotations

import json
import re
import shlex

import tomllib

from tests.support import ROOT

# the command's words: up to the end of its code span or line, a shell operator, a comment or a closing bracket
INSTALL = re.compile(r"pip install ([^`\n)&;#|]+)")
CHECKOUT = re.compile(r"\.(?:\[([A-Za-z0-9_,\-]*)\])?")
TAKES_VALUE = {
    "-r",
    "--requirement",
    "--index-url",
    "-i",
    "--extra-index-url",
    "-c",
    "--constraint",
    "-f",
    "--find-links",
}


def documents() -> dict[str, str]:
    """README.md and docs/'s Markdown and notebooks (every cell's source), by path."""
    texts = {"README.md": (ROOT / "README.md").read_text(encoding="utf-8")}
    for path in sorted((ROOT / "docs").rglob("*.md")):
        texts[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "docs").rglob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        texts[str(path.relative_to(ROOT))] = "\n".join("".join(cell["source"]) for cell in cells)
    return texts


def install_lines() -> list[tuple[str, list[str]]]:
    return [
        (where, shlex.split(match.group(1))) for where, text in documents().items() for match in INSTALL.finditer(text)
    ]


def pinned_requirements() -> set[str]:
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return {line.split("#")[0].strip() for line in lines if "==" in line}


def problems(words: list[str], extras: set[str], pinned: set[str]) -> list[str]:
    """What in one `pip install` command does not work from a checkout."""
    found, i = [], 0
    while i < len(words):
        word = words[i]
        if word in ("-r", "--requirement") and not (ROOT / words[i + 1]).is_file():
            found.append(f"no requirements file {words[i + 1]!r}")
        if word in TAKES_VALUE:
            i += 2
            continue
        i += 1
        if word.startswith("-"):  # -e, -U, --upgrade...
            continue
        checkout = CHECKOUT.fullmatch(word)
        if checkout:
            found += [
                f"no extra {name!r} in pyproject.toml"
                for name in (checkout.group(1) or "").split(",")
                if name and name not in extras
            ]
        elif word not in pinned:
            found.append(f"{word!r} is not the checkout, a requirements file or a pin of requirements.txt")
    return found


def test_every_documented_pip_install_line_works_from_a_checkout():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = set(pyproject["project"]["optional-dependencies"])
    pinned = pinned_requirements()
    lines = install_lines()
    assert len(lines) >= 8, lines  # the README's and the docs' lines are all read (one per notebook cell too)
    assert any(where.endswith(".ipynb") for where, _ in lines)
    bad = {f"{where}: pip install {shlex.join(words)}": problems(words, extras, pinned) for where, words in lines}
    assert not {line: why for line, why in bad.items() if why}


def test_the_check_refuses_what_fails_from_a_checkout():
    extras, pinned = {"notebook", "transformer-lens"}, {"torch==2.13.0"}
    assert problems(shlex.split('".[notebook,transformer-lens]"'), extras, pinned) == []
    assert problems(["-r", "requirements.txt"], extras, pinned) == []
    assert problems(shlex.split("torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"), extras, pinned) == []
    assert problems(shlex.split('"gptviz[notebook,transformer-lens]"'), extras, pinned)  # on no registry
    assert problems(shlex.split("'.[notebok]'"), extras, pinned) == ["no extra 'notebok' in pyproject.toml"]
    assert problems(["-r", "requirements-missing.txt"], extras, pinned)
