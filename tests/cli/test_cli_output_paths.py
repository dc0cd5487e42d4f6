"""Every option or argument naming what a command writes reports a wrong kind of path (a folder
where a file is written, a file where a folder is) as refspec's own line: the option, the path,
what is wrong and what to give; never click's "Invalid value ..." message."""

import pytest

from cli_helpers import assert_user_error, invoke

# (command line with {dir} for an existing folder and {file} for an existing file, the option
# as the message names it, the path given, what the message asks for)
CASES = [
    ("generate -o {dir}", "--output", "{dir}", "give the path of the .h5 file to write"),
    ("generate --op rope --output {dir}", "--output", "{dir}", "give the path of the .h5 file to write"),
    ("merge {dir} {file}", "", "{dir}", "give the path of the merged .h5 file to write"),
    ("pack {file} -o {dir}", "--output", "{dir}", "give the path of the .h5 file to write"),
    ("golden {dir} -o {dir}", "--output", "{dir}", "give the path of the .h5 file to write"),
    ("check-dump {dir} --map {file} -o {dir}", "--output", "{dir}", "give the path of the .h5 file to write"),
    ("export {file} -o {file}", "--output", "{file}", "give the folder to write the cases into"),
    ("compare {file} {dir} --json {dir}", "--json", "{dir}", "give a file name"),
    ("compare {file} {dir} --junit {dir}", "--junit", "{dir}", "give a file name"),
    ("compare {file} {dir} --html {dir}", "--html", "{dir}", "give a file name"),
    ("run {file} --impl my_kernels --json {dir}", "--json", "{dir}", "give a file name"),
    ("check-dump {dir} --map {file} --html {dir}", "--html", "{dir}", "give a file name"),
]


@pytest.mark.parametrize("line, option, path, give", CASES, ids=[c[0] for c in CASES])
def test_a_wrong_kind_of_output_path_is_refspecs_own_line(line, option, path, give, tmp_path):
    folder, file = tmp_path / "adir", tmp_path / "afile.h5"
    folder.mkdir()
    file.write_bytes(b"")
    fill = {"dir": str(folder), "file": str(file)}
    path = path.format(**fill)
    result = invoke(*line.format(**fill).split())
    what = "is a file" if give.startswith("give the folder") else "is a directory"
    assert_user_error(result, f"refspec: error: {option + ' ' if option else ''}{path}: {what}; {give}")
    assert "Invalid value" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile.h5"]
    assert not any(folder.iterdir()) and file.read_bytes() == b""        # nothing written
