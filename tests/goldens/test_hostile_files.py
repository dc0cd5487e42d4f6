"""Hostile golden files (tests/hostile_goldens.py): each is one clear line and exit code 2 from
`refspec show`, `refspec export` and `refspec compare` (never a traceback, never exit code 1,
the code of a kernel that failed), and a GoldenFileError naming the file when read through refspec.goldens; the
sound file passes every check."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import refspec.goldens as goldens
from cli_helpers import assert_user_error, invoke
from hostile_goldens import CASE_OF, CATALOGUE, command_args, hostile_file, read_everything, sound_file


@pytest.fixture(scope="module")
def sound(tmp_path_factory):
    path = sound_file(tmp_path_factory.mktemp("sound") / "sound.h5")
    # judged against itself: it passes, and this process's compiled pass is loaded, so no
    # later compare prints the notice of a compile that takes a while (on a busy machine)
    assert invoke("compare", path, path).exit_code == 0
    return path


def test_the_sound_file_passes_every_check(sound, tmp_path):
    read_everything(sound)
    assert invoke("show", "--verify", sound).exit_code == 0
    assert invoke("export", sound, "-o", tmp_path / "out").exit_code == 0


@pytest.mark.parametrize("entry", CATALOGUE, ids=[e.name for e in CATALOGUE])
def test_a_hostile_file_is_one_line_and_exit_2(sound, tmp_path, entry):
    path = hostile_file(sound, entry, tmp_path)
    for command in entry.commands:
        args = command_args(command, path, entry, tmp_path / "out")
        result = invoke(*args)
        assert_user_error(result, os.path.basename(path), *entry.fragments)
        if command[0] == "export":                      # nothing half-written is left
            left = [f for _, _, files in os.walk(tmp_path / "out") for f in files
                    if f.endswith(".tmp")]
            assert left == []
    with pytest.raises(goldens.GoldenFileError) as info:
        read_everything(path)
    message = str(info.value)
    assert "\n" not in message and path in message
    assert all(f in message for f in entry.fragments), message


def test_a_hostile_file_in_a_new_process_never_leaves_a_traceback(sound, tmp_path):
    """The console script itself (not click's runner): one line on stderr, exit code 2."""
    entry = next(e for e in CATALOGUE if e.name == "index text that is not JSON")
    path = hostile_file(sound, entry, tmp_path)
    proc = subprocess.run([sys.executable, "-m", "refspec", "show", path, CASE_OF[entry.name]],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_an_incomplete_file_is_read_when_asked_for(sound, tmp_path):
    entry = next(e for e in CATALOGUE if e.name == "file marked incomplete")
    path = hostile_file(sound, entry, tmp_path)
    result = invoke("show", "--allow-incomplete", path)
    assert result.exit_code == 0 and "complete:          NO" in result.output
    assert invoke("export", "--allow-incomplete", path, "-o", tmp_path / "o").exit_code == 0
    with goldens.open(path, allow_incomplete=True) as gf:
        assert len(gf) == 2


def test_the_errors_are_one_family_the_comparator_can_catch():
    for cls in (goldens.CorruptGoldenError, goldens.IncompleteGoldenError,
                goldens.GoldenFileLockedError, goldens.GoldenFileExistsError):
        assert issubclass(cls, goldens.GoldenFileError) and issubclass(cls, OSError)
    err = goldens.CorruptGoldenError("its bytes do not match", "/g.h5", "c/1", "expected/dx")
    assert str(err) == "/g.h5: case c/1: expected/dx: its bytes do not match"
    assert (err.case_id, err.dataset) == ("c/1", "expected/dx")
    import pickle
    again = pickle.loads(pickle.dumps(err))                 # from a worker process, whole
    assert str(again) == str(err) and again.dataset == "expected/dx"
