"""Shared helpers of the CLI tests (fixtures: the test folders are not on sys.path)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_commands(heading: str) -> list[list[str]]:
    """The argv (after ``mutransfer``) of every ``mutransfer`` line in the first bash block
    under ``heading`` in README.md (continuation lines joined, comments dropped)."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(heading):]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        argv = list(lexer)
        if argv and argv[0] == "mutransfer":
            out.append(argv[1:])
    return out


@pytest.fixture(scope="session")
def readme_commands() -> Callable[[str], list[list[str]]]:
    return _readme_commands
