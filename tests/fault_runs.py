"""Running `refspec` in processes of its own and hurting them: signals at chosen moments, a small
file system that fills up, a second run on the same output. Used by the fault-injection tests
(tests/faults/) and by benchmarks/bench_faults.py, which tries many more moments.

Each fault ends in one of the outcomes the tests and the benchmark count: the run finished, or
it stopped with one clear line (``one_line``), and then `--resume` (or `--force` for an export)
gives the same bits as an uninterrupted run (``same_content``, ``same_tree``)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import time

from refspec.goldens.sweep import load_sweep

from golden_files import file_content

#: the selection the faults are tried on: the smoke sweep's RotaryPositionEmbeddingGrad cases
SELECTION = ("--op", "rope_grad")
#: a run long enough (seconds, larger cases) that a second run started beside it finds it at work
LONG_RUN = ("--sweep", "standard", "--tier", "quick")
#: how many cases the long run writes
LONG_RUN_CASES = len(load_sweep("standard").cases("quick"))
#: how many cases the smoke sweep writes
SMOKE_CASES = len(load_sweep("smoke").cases())


def command(*args) -> list[str]:
    return [sys.executable, "-m", "refspec", *[str(a) for a in args]]


def run(*args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(command(*args), capture_output=True, text=True, timeout=timeout)


def start(*args) -> subprocess.Popen:
    """`refspec ARGS` in a session of its own (its process group, as a shell would start it)."""
    return subprocess.Popen(command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (the workers of a run)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def hurt(args, seconds: float, sig=signal.SIGKILL, group=True, timeout=600, after=None):
    """Start `refspec ARGS`, send ``sig`` after ``seconds`` (counted from when the file
    ``after`` appears, if given) to its process group (``group``) or to the main process alone;
    returns (exit code, stderr, the workers it had, whether it had ended before the signal)."""
    proc = start(*args)
    while after is not None and not os.path.exists(after) and proc.poll() is None:
        time.sleep(0.01)
    deadline = time.monotonic() + seconds
    workers = []
    while time.monotonic() < deadline and proc.poll() is None:
        workers = sorted(set(workers) | set(children(proc.pid)))
        time.sleep(0.02)
    ended = proc.poll() is not None
    if not ended:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, sig)
            else:
                os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err, workers, ended


def wait_gone(pids, seconds: float) -> list[int]:
    """The processes of ``pids`` still running after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def one_line(stderr: str, *fragments) -> bool:
    """One line on stderr, ``refspec: error: ...`` holding every fragment, no traceback."""
    lines = stderr.strip().splitlines()
    return (len(lines) == 1 and lines[0].startswith("refspec: error:")
            and all(str(f) in lines[0] for f in fragments))


def same_content(path, reference: dict) -> bool:
    """Whether the golden file holds exactly the cases of ``reference`` (``file_content``: ids
    in order, metadata, every dataset's bytes)."""
    try:
        return file_content(path) == reference
    except Exception:
        return False


def tree_digest(root) -> dict:
    """{relative path: sha256} of every file under ``root``."""
    out = {}
    for d, _, files in os.walk(root):
        for name in files:
            p = os.path.join(d, name)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


@contextlib.contextmanager
def small_filesystem(path, size: str):
    """A tmpfs of ``size`` (mount's spelling: ``24m``) at ``path``; ``OSError`` where it
    cannot be mounted (not root, no tmpfs). Yields ``grow(size)``, which makes it larger."""
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode:
        raise OSError(f"cannot mount a tmpfs at {path}: {done.stderr.strip()}")

    def grow(new_size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={new_size}", str(path)], check=True)

    try:
        yield grow
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def can_mount() -> bool:
    return os.geteuid() == 0 and os.path.exists("/proc/filesystems") and "tmpfs" in open(
        "/proc/filesystems").read()
