"""Cheap unique ids: unique in a process and in a forked child, with no system call per id."""

from __future__ import annotations

import os

import pytest

from shelfhand.core.ids import new_id


def test_ids_are_unique_and_32_hex_characters() -> None:
    ids = [new_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_repeats_its_parents_ids() -> None:
    before = new_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave at once
        os.write(write, new_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    parent = new_id()
    assert child != parent
    assert child[:16] != before[:16]  # a new prefix, not the parent's counter run
    assert parent[:16] == before[:16]


def test_the_first_id_of_a_process_does_not_end_in_sixteen_zeros() -> None:
    import subprocess
    import sys

    firsts = {
        subprocess.run(
            [sys.executable, "-c", "from shelfhand.core.ids import new_id; print(new_id())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for _ in range(3)
    }

    assert len(firsts) == 3
    assert all(len(i) == 32 and not i.endswith("0" * 16) for i in firsts), firsts


def test_ids_keep_sixteen_counter_digits_from_the_lowest_to_the_highest_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import itertools

    from shelfhand.core import ids

    for start in (0, 1, (1 << 62) - 1, (1 << 63) + 5):
        monkeypatch.setattr(ids, "_next", itertools.count(ids._ABOVE | start).__next__)
        made = ids.new_id()
        assert len(made) == 32
        assert int(made[16:], 16) == start
