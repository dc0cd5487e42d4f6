"""The command-line entry point: version, help, and one-line errors with exit code 2."""

import subprocess
import sys

import pytest

from click.testing import CliRunner

import refspec
from refspec.cli import main


def test_version_and_help():
    runner = CliRunner()
    res = runner.invoke(main, ["--version"])
    assert res.exit_code == 0 and refspec.__version__ in res.output
    res = runner.invoke(main, ["--help"])
    assert res.exit_code == 0 and "Usage:" in res.output


def test_unknown_command_is_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "refspec", "no-such-command"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("refspec: error:") and "no-such-command" in lines[0]
    assert "Traceback" not in proc.stderr


def test_python_m_refspec_cli_with_worker_processes(tmp_path):
    """Worker processes re-import the started script as __mp_main__; that must not register
    the command modules a second time (it used to kill the workers)."""
    out = tmp_path / "one.h5"
    case = subprocess.run([sys.executable, "-m", "refspec.cli", "list"], capture_output=True,
                          text=True, timeout=120).stdout.splitlines()[:2]
    args = [sys.executable, "-m", "refspec.cli", "generate", "--jobs", "2", "-o", str(out)]
    for cid in case:
        args += ["--case", cid]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and "Traceback" not in proc.stderr


def test_bare_refspec_prints_the_help_with_exit_0():
    proc = subprocess.run([sys.executable, "-m", "refspec"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Usage: ") and "Commands:" in lines and len(lines) > 10
    assert any(ln.strip().startswith("compare") for ln in lines)


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_inside_the_test_runner_interrupts_the_caller(monkeypatch):
    """Ctrl-C while a command runs in this process (click's test runner in a test session)
    reaches the caller as a KeyboardInterrupt, so the test session stops instead of counting
    one more command that exited with 130."""
    from refspec.cli import generate
    monkeypatch.setattr(generate, "load_sweep", _interrupt)
    with pytest.raises(KeyboardInterrupt):
        CliRunner().invoke(main, ["list"])


def test_ctrl_c_at_the_process_entry_is_one_line_and_exit_130(monkeypatch, capsys):
    """The console script's entry (``main()``): one line on stderr, exit code 130."""
    from refspec.cli import generate
    monkeypatch.setattr(generate, "load_sweep", _interrupt)
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "-o", "never.h5"], prog_name="refspec")
    assert exit_.value.code == 130
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["refspec: error: interrupted before any case was written"]


HDF5_FULL = ("Driver write request failed (file write failed: time = Wed Dec  2 08:13:30 2026, "
             "filename = '/data/g.h5.part', file descriptor = 3, errno = 28, error message = 'No "
             "space left on device', buf = 0x563f, total write size = 1031715, bytes this "
             "sub-write = 1031715, offset = 70389858304)")


@pytest.mark.parametrize("error", [OSError(HDF5_FULL), OSError(28, "No space left on device",
                                                                "/data/g.h5.part")])
def test_a_full_disk_is_one_line_naming_the_file(monkeypatch, capsys, error):
    """h5py reports a full disk inside HDF5's own message; the line names the file and says
    what to do, not HDF5's buffer addresses."""
    from refspec.cli import generate

    def full(*args, **kwargs):
        raise error
    monkeypatch.setattr(generate, "load_sweep", full)
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "-o", "g.h5"], prog_name="refspec")
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["refspec: error: /data/g.h5.part: no space left on the device; free some "
                     "and run the same command with --resume to continue (the cases written so "
                     "far are kept), or write a smaller selection (--tier, --op, --shard K/N)"]
