"""The README's example runs and prints what it says it prints."""

import re
import subprocess
import sys

from repo_paths import CI, README


def _python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_example_runs():
    blocks = _python_blocks()
    assert blocks, "README has no python example"
    out = subprocess.run([sys.executable, "-c", blocks[0]], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("bfloat16 (1, 1, 16, 64)")
    assert "layout='BNSD'" in lines[0] and "cos_pattern='11SD'" in lines[0]
    assert lines[1] == "561002 dy: D=63 must be even [rotary_position_embedding_grad mode=0]"


def test_readme_setup_commands_come_first():
    text = README.read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, flags=re.S).group(1)
    commands = [line for line in first_block.splitlines() if line and not line.startswith("#")]
    assert commands[0].endswith("refspec generate -o smoke.h5")
    assert "python -m pytest -q" in commands[1] and ".[test]" in commands[1]
    assert "python -m pytest -q" in CI.read_text()


def test_readme_walkthrough_runs_in_seconds(tmp_path):
    """The command-line walkthrough (up to the kernel's part) runs as written, on a tier that
    finishes in seconds."""
    text = README.read_text()
    block = re.search(r"## The command line in five steps.*?```bash\n(.*?)```", text, flags=re.S).group(1)
    commands = [line.split("  #")[0].replace(" [CASE_ID]", "").strip()
                for line in block.splitlines() if line.startswith("refspec ")]
    assert [c.split()[1] for c in commands] == ["list", "generate", "show", "export", "compare"]
    for command in commands[:4]:
        out = subprocess.run([sys.executable, "-m", "refspec", *command.split()[1:]], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (command, out.stderr)
    stated = int(re.search(r"default tier \((\d+) cases on tiny shapes", text).group(1))
    assert len(list((tmp_path / "cases").rglob("case.json"))) == stated
