"""Running the command line in process and checking its usage errors."""

from __future__ import annotations

from click.testing import CliRunner

from refspec.cli import main


def invoke(*args):
    """`refspec ARGS...` in process; an exception other than the exit itself fails the test."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def assert_user_error(result, *fragments):
    """Exit code 2, one line `refspec: error: ...` on stderr holding every fragment, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("refspec: error:"), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
