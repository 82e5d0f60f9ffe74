"""gptviz.index.atomic_write: a write that fails part way leaves the old file (or folder) whole and no temporary file
behind; a write that succeeds went through a temporary name in the same folder, fsync'ed, then os.replace."""

from __future__ import annotations

import os

import pytest

from gptviz.index import atomic_write as aw


class Boom(Exception):
    pass


def test_a_write_replaces_the_file_through_a_fsynced_temporary_in_the_same_folder(tmp_path, monkeypatch):
    target = tmp_path / "index.json"
    target.write_text("old")
    calls = []
    real_replace, real_fsync = os.replace, os.fsync
    monkeypatch.setattr(aw.os, "replace", lambda a, b: (calls.append(("replace", a, b)), real_replace(a, b)))
    monkeypatch.setattr(aw.os, "fsync", lambda fd: (calls.append(("fsync", fd)), real_fsync(fd)))
    assert aw.atomic_write(target, "new ✓") == target
    assert target.read_text(encoding="utf-8") == "new ✓"
    kinds = [c[0] for c in calls]
    assert kinds.index("fsync") < kinds.index("replace")  # the data is on disk before the name points at it
    _, src, dst = next(c for c in calls if c[0] == "replace")
    assert os.path.dirname(src) == str(tmp_path) and os.path.basename(src).startswith(aw.TEMP_PREFIX)
    assert str(dst) == str(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "index.json"
    target.write_bytes(b"whole old file")
    with pytest.raises(Boom):
        with aw.atomic_file(target) as f:
            f.write(b"half of the new")
            raise Boom
    assert target.read_bytes() == b"whole old file"
    assert [p.name for p in tmp_path.iterdir()] == ["index.json"]


def test_text_mode_and_a_new_file(tmp_path):
    with aw.atomic_file(tmp_path / "a.txt", "w", encoding="utf-8") as f:
        f.write("line ⟦x⟧\n")
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "line ⟦x⟧\n"
    with pytest.raises(ValueError, match="mode"):
        with aw.atomic_file(tmp_path / "b.txt", "a"):
            pass


def test_a_folder_is_swapped_in_whole_or_not_at_all(tmp_path):
    dest = tmp_path / "abc123"
    with aw.atomic_folder(dest) as tmp:
        (tmp / "index.json").write_text("v1")
        (tmp / "index.npz").write_bytes(b"npz1")
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == {"index.json": b"v1", "index.npz": b"npz1"}
    with pytest.raises(Boom):  # a rebuild that dies after one of its two files: the old pair stays
        with aw.atomic_folder(dest) as tmp:
            (tmp / "index.npz").write_bytes(b"npz2")
            raise Boom
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == {"index.json": b"v1", "index.npz": b"npz1"}
    with aw.atomic_folder(dest) as tmp:  # a rebuild that ends: the new pair only (no file of the old left)
        (tmp / "index.json").write_text("v2")
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == {"index.json": b"v2"}
    assert [p.name for p in tmp_path.iterdir()] == ["abc123"]  # no temporary or old folder left


def test_the_old_folder_comes_back_when_the_new_one_cannot_go_in(tmp_path, monkeypatch):
    dest = tmp_path / "abc"
    dest.mkdir()
    (dest / "index.json").write_text("old")
    real = os.replace

    def failing(a, b):
        if str(b) == str(dest) and aw.TEMP_PREFIX + "abc." in str(a) and ".old." not in str(a):
            raise OSError("disk gone")
        return real(a, b)

    monkeypatch.setattr(aw.os, "replace", failing)
    with pytest.raises(OSError, match="disk gone"):
        with aw.atomic_folder(dest) as tmp:
            (tmp / "index.json").write_text("new")
    assert (dest / "index.json").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["abc"]
