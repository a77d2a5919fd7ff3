"""The CLI's one-line errors (issue 44): a storage refusal on any output (disk full, over quota, read-only, no
permission, a name too long) is one `error:` line naming the file and exit code 2, wherever it is raised; any other
OS error is a bug and keeps its traceback."""

from __future__ import annotations

import errno
import os

import pytest
import typer

from flows.engine.console import console, user_errors


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                                  errno.ENAMETOOLONG])
def test_a_storage_refusal_is_one_line_naming_the_file(code):
    with console.capture() as captured, pytest.raises(typer.Exit) as stopped, user_errors():
        raise OSError(code, os.strerror(code), "data/export/data/train-00000.parquet")
    assert stopped.value.exit_code == 2
    assert captured.get().splitlines() == [f"error: {os.strerror(code)}: data/export/data/train-00000.parquet"]


@pytest.mark.parametrize("error", [FileNotFoundError(errno.ENOENT, "No such file or directory", "x"),
                                   OSError(errno.EBADF, "Bad file descriptor"), ConnectionResetError()])
def test_any_other_os_error_keeps_its_traceback(error):
    with pytest.raises(type(error)), user_errors():
        raise error
