"""Golden store: atomic writes, interrupted runs (exception and killed process) and resume."""

from dataclasses import replace
import os
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest

import refspec
import refspec.goldens as goldens
from refspec.goldens.example import rope_grad_case

SWEEP = dict(sweep_name="resume", sweep_definition="[axes]\nmode = [0, 1]\n", sweep_seed=11)
CASES = [(f"rope_grad/mode={m}/dtype={d}", dict(mode=m, dtype=d, seed=10 * m + i))
         for i, d in enumerate(("float32", "bfloat16", "float16")) for m in (0, 1)][:5]


def case_kwargs(spec):
    return rope_grad_case(shape=(2, 2, 8, 16), **spec)


def content(path):
    """Everything a golden file holds except its creation time: attributes of every object,
    dataset dtypes, shapes, filters and raw bytes."""
    out = {}
    with h5py.File(path, "r") as f:
        out["/"] = {k: v for k, v in f.attrs.items() if k not in ("created", "complete")}

        def visit(name, obj):
            attrs = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in obj.attrs.items()}
            if isinstance(obj, h5py.Dataset):
                data = obj[()]
                out[name] = (attrs, obj.dtype.str, obj.shape, obj.compression, obj.chunks,
                             data.tolist() if data.dtype.kind == "O" else data.tobytes())
            else:
                out[name] = (attrs, list(obj.keys()))
        f.visititems(visit)
    return out


class Boom:
    def __array__(self, *args, **kwargs):
        raise RuntimeError("boom while writing")


def write_all(path, **writer):
    with goldens.GoldenWriter(path, **SWEEP, **writer) as w:
        for case_id, spec in CASES:
            if not w.has_case(case_id):
                w.write_case(replace(case_kwargs(spec), case_id=case_id))
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return content(write_all(tmp_path_factory.mktemp("ref") / "ref.h5"))


def test_exception_mid_case_leaves_part_and_resume_completes(tmp_path, reference):
    path = tmp_path / "g.h5"
    with pytest.raises(RuntimeError, match="boom"):
        with goldens.GoldenWriter(path, **SWEEP) as w:
            for case_id, spec in CASES[:3]:
                w.write_case(replace(case_kwargs(spec), case_id=case_id))
            kw = case_kwargs(CASES[3][1])
            kw.inputs = {**kw.inputs, "cos": Boom()}      # dy is written, then it fails
            w.write_case(replace(kw, case_id=CASES[3][0]))
    assert not path.exists()
    part = tmp_path / "g.h5.part"
    assert part.exists()
    with goldens.open(part, allow_incomplete=True) as gf:
        assert gf.attrs["complete"] is False and not gf.complete
        assert gf.case_ids() == [c for c, _ in CASES[:3]]
    with h5py.File(part, "r") as f:            # the half-written case is there, but not marked
        half = f["cases/" + CASES[3][0]]
        assert "dy" in half["inputs"] and "written" not in half.attrs
    with pytest.raises(goldens.GoldenFileExistsError, match="--resume"):
        goldens.GoldenWriter(path, **SWEEP)
    with goldens.GoldenWriter(path, **SWEEP, resume=True) as w:
        assert [w.has_case(c) for c, _ in CASES] == [True, True, True, False, False]
        for case_id, spec in CASES:
            if not w.has_case(case_id):
                w.write_case(replace(case_kwargs(spec), case_id=case_id))
        assert w.cases_written == 2
    assert path.exists() and not part.exists()
    assert content(path) == reference


KILLER = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from dataclasses import replace
    import refspec.goldens as goldens
    from test_goldens_resume import CASES, SWEEP, case_kwargs

    class Kill:
        def __array__(self, *args, **kwargs):
            w.flush()                              # what reached the disk stays there
            os.kill(os.getpid(), signal.SIGKILL)

    w = goldens.GoldenWriter({path!r}, **SWEEP)
    for case_id, spec in CASES[:2]:
        w.write_case(replace(case_kwargs(spec), case_id=case_id))
    kw = case_kwargs(CASES[2][1])
    kw.inputs = {{**kw.inputs, "sin": Kill()}}
    w.write_case(replace(kw, case_id=CASES[2][0]))
    print("not killed")
""")


def test_killed_process_leaves_resumable_part(tmp_path, reference):
    path = tmp_path / "g.h5"
    script = KILLER.format(tests=os.path.dirname(__file__), path=str(path))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert "not killed" not in proc.stdout
    assert not path.exists()
    part = tmp_path / "g.h5.part"
    with goldens.open(part, allow_incomplete=True) as gf:
        assert not gf.complete and gf.case_ids() == [c for c, _ in CASES[:2]]
    write_all(path, resume=True)
    assert not part.exists()
    assert content(path) == reference


def test_resume_of_a_complete_file(tmp_path, reference):
    path = write_all(tmp_path / "g.h5")
    before = os.stat(path).st_mtime_ns
    with goldens.GoldenWriter(path, **SWEEP, resume=True) as w:
        assert all(w.has_case(c) for c, _ in CASES)
        assert w.case_ids() == [c for c, _ in CASES]
    assert os.stat(path).st_mtime_ns == before and not (tmp_path / "g.h5.part").exists()
    with goldens.GoldenWriter(path, **SWEEP, resume=True) as w:
        w.write_case(replace(case_kwargs(dict(mode=0, dtype='float32', seed=99)), case_id='extra'))
    with goldens.open(path) as gf:
        assert gf.complete and gf.case_ids() == [c for c, _ in CASES] + ["extra"]


def test_resume_of_another_sweep_is_refused(tmp_path):
    path = tmp_path / "g.h5"
    with pytest.raises(RuntimeError):
        with goldens.GoldenWriter(path, **SWEEP) as w:
            w.write_case(replace(case_kwargs(CASES[0][1]), case_id=CASES[0][0]))
            raise RuntimeError("stop")
    with h5py.File(tmp_path / "g.h5.part", "r+") as f:
        f.attrs["refspec_version"] = "0.0.1"
    with pytest.raises(goldens.GoldenFileError, match="written by refspec 0.0.1"):
        goldens.GoldenWriter(path, **SWEEP, resume=True)
    with h5py.File(tmp_path / "g.h5.part", "r+") as f:
        f.attrs["refspec_version"] = refspec.__version__
    other = {**SWEEP, "sweep_seed": 12}
    with pytest.raises(goldens.GoldenFileError, match="another sweep.*sweep_seed"):
        goldens.GoldenWriter(path, **other, resume=True)
    with goldens.GoldenWriter(path, **other, force=True) as w:   # force starts over
        assert not w.has_case(CASES[0][0])
    with goldens.open(path) as gf:
        assert gf.case_ids() == [] and gf.attrs["sweep_seed"] == 12


def test_force_replaces_only_when_complete(tmp_path):
    path = write_all(tmp_path / "g.h5")
    with pytest.raises(RuntimeError):
        with goldens.GoldenWriter(path, **SWEEP, force=True):
            raise RuntimeError("interrupted")
    with goldens.open(path) as gf:           # the old complete file is untouched
        assert gf.complete and len(gf) == len(CASES)
    assert (tmp_path / "g.h5.part").exists()


def test_resume_of_a_part_hdf5_cannot_open_starts_over_and_says_so(tmp_path, reference, caplog):
    part = tmp_path / "g.h5.part"
    part.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    with caplog.at_level("WARNING", logger="refspec"):
        write_all(tmp_path / "g.h5", resume=True)
    assert "cannot be read; every case is written again" in caplog.text
    assert content(tmp_path / "g.h5") == reference


# --- nothing found is trusted; nothing complete is taken away ------------------------------------

def test_one_writer_per_output_and_the_second_changes_nothing(tmp_path):
    path = tmp_path / "g.h5"
    with goldens.GoldenWriter(path, **SWEEP) as first:
        first.write_case(replace(case_kwargs(CASES[0][1]), case_id=CASES[0][0]))
        first.flush()
        part = tmp_path / "g.h5.part"
        inode, size = os.stat(part).st_ino, os.path.getsize(part)
        for kw in ({"force": True}, {"resume": True}):
            with pytest.raises(goldens.GoldenFileLockedError, match=f"{path}: being written"):
                goldens.GoldenWriter(path, **SWEEP, **kw)
        assert (os.stat(part).st_ino, os.path.getsize(part)) == (inode, size)
        first.write_case(replace(case_kwargs(CASES[1][1]), case_id=CASES[1][0]))
    assert not os.path.exists(f"{path}.lock")
    with goldens.open(path) as gf:
        assert gf.case_ids() == [c for c, _ in CASES[:2]]


def interrupted_after(tmp_path, n: int):
    """(path, its .part) of a run stopped by an exception after its first ``n`` cases."""
    path = tmp_path / "g.h5"
    with pytest.raises(RuntimeError):
        with goldens.GoldenWriter(path, **SWEEP) as w:
            for case_id, spec in CASES[:n]:
                w.write_case(replace(case_kwargs(spec), case_id=case_id))
            raise RuntimeError("stop")
    return path, tmp_path / "g.h5.part"


def test_a_part_left_by_a_killed_writer_is_copied_not_written_again(tmp_path, reference):
    """A .part whose writer never closed it (``writing`` still set) may hold HDF5 metadata
    that only its writer knew of: its sound cases are copied into a new .part."""
    path, part = interrupted_after(tmp_path, 3)
    with h5py.File(part, "r+") as f:
        f.attrs["writing"] = True                 # what a kill leaves
    inode = os.stat(part).st_ino
    with goldens.GoldenWriter(path, **SWEEP, resume=True) as w:
        assert [w.has_case(c) for c, _ in CASES] == [True] * 3 + [False] * 2
        assert os.stat(part).st_ino != inode       # a new file holds the copied cases
        for case_id, spec in CASES[3:]:
            w.write_case(replace(case_kwargs(spec), case_id=case_id))
    assert content(path) == reference


def test_a_damaged_case_is_written_again_with_those_after_it(tmp_path, reference):
    """Resume checks every dataset it finds: the cases from the first damaged one on are
    written again, so the file ends as an uninterrupted run writes it."""
    path, part = interrupted_after(tmp_path, 4)
    with h5py.File(part, "r") as f:
        at = f[f"cases/{CASES[1][0]}/exact/dx"].id.get_offset()
    with open(part, "r+b") as fh:
        fh.seek(at + 8)
        fh.write(b"\xff\xff")
    with goldens.GoldenWriter(path, **SWEEP, resume=True) as w:
        assert [w.has_case(c) for c, _ in CASES] == [True] + [False] * 4
        assert "1 cases are sound" in w.recovered
        for case_id, spec in CASES[1:]:
            w.write_case(replace(case_kwargs(spec), case_id=case_id))
    assert content(path) == reference


def test_extending_a_complete_file_leaves_it_in_place_until_the_new_one_is_complete(tmp_path):
    path = write_all(tmp_path / "g.h5")
    inode = os.stat(path).st_ino
    with goldens.open(path) as reader:              # a comparison reading it meanwhile
        with goldens.GoldenWriter(path, **SWEEP, resume=True) as w:
            w.write_case(replace(case_kwargs(dict(mode=0, dtype="float32", seed=9)),
                                 case_id="extra"))
            assert os.stat(path).st_ino == inode     # untouched while the copy grows
            with goldens.open(path) as again:
                assert again.complete and "extra" not in again
        assert len(reader) == len(CASES) and reader[CASES[0][0]].inputs["dy"].read().size
    with goldens.open(path) as gf:
        assert gf.complete and gf.case_ids()[-1] == "extra"
    with pytest.raises(RuntimeError):                # a failed extension: the file is kept
        with goldens.GoldenWriter(path, **SWEEP, resume=True) as w:
            w.write_case(replace(case_kwargs(dict(mode=1, dtype="float32", seed=9)),
                                 case_id="extra2"))
            raise RuntimeError("stop")
    with goldens.open(path) as gf:
        assert gf.complete and gf.case_ids()[-1] == "extra"
