"""The README a newcomer reads: short, one heading per task, and every command in it
runs as written. Each shell command in its code blocks (and in the docs') goes through the real parser of the
`mutransfer` command (argparse, the same ``build_parser`` that ``main`` uses) without
running the job; the docs' relative links resolve to files inside the repository."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from mutransfer_cli import VERBS, build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_WORDS = 2500
TASK_HEADINGS = ("Your own model", "Tune your own model", "Read the card",
                 "Export to HF, torchtitan or Megatron", "Run on many GPUs and machines",
                 "Use the Python API", "Dive into the code")
#: The two commands at the very top; CI runs the second as written (.ci/run).
TOP_COMMANDS = (
    "bash install.sh && .venv/bin/mutransfer demo --out runs/demo",
    "bash install.sh && .venv/bin/python -m pytest -n 2",
)
SHELL_LANGS = {"", "bash", "sh", "shell", "console"}


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block."""
    return [(m.group(1).strip(), m.group(2))
            for m in re.finditer(r"^```([^\n]*)\n(.*?)^```", text, flags=re.M | re.S)]


def shell_commands(text: str) -> list[list[str]]:
    """Every simple command (argv) in the shell code blocks: continuation lines joined,
    comments dropped, split at ``&&``, ``||``, ``;`` and ``|``; redirections removed."""
    commands = []
    for lang, body in code_blocks(text):
        if lang not in SHELL_LANGS:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            argv: list[str] = []
            tokens = list(lexer)
            i = 0
            while i < len(tokens):
                tok = tokens[i]
                if tok in ("&&", "||", ";", "|", "&"):
                    if argv:
                        commands.append(argv)
                    argv = []
                elif tok in (">", ">>", "<"):
                    i += 1  # the redirection's target is not an argument
                elif argv or not re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", tok):
                    argv.append(tok)  # (a leading VAR=value sets the environment)
                i += 1
            if argv:
                commands.append(argv)
    return commands


def mutransfer_argv(argv: list[str]) -> list[str] | None:
    """The arguments after the ``mutransfer`` command (or ``python -m mutransfer_cli``)."""
    prog = Path(argv[0]).name
    if prog == "mutransfer":
        return argv[1:]
    if prog.startswith("python") and argv[1:3] == ["-m", "mutransfer_cli"]:
        return argv[3:]
    return None


def readme_commands() -> list[list[str]]:
    return shell_commands(README.read_text(encoding="utf-8"))


def docs_commands() -> list[list[str]]:
    """The README's commands, then those of the docs' shell code blocks."""
    docs = (argv for path in DOCS for argv in shell_commands(path.read_text(encoding="utf-8")))
    return [*readme_commands(), *docs]


def test_readme_is_short() -> None:
    words = len(README.read_text(encoding="utf-8").split())
    assert words < MAX_WORDS, f"README.md has {words} words; the limit is {MAX_WORDS} (move detail to docs/)"


def test_readme_has_a_heading_per_task() -> None:
    headings = re.findall(r"^##+ (.+?)\s*$", README.read_text(encoding="utf-8"), flags=re.M)
    missing = [h for h in TASK_HEADINGS if h not in headings]
    assert not missing, f"README.md lacks the headings {missing}; it has {headings}"


def test_readme_opens_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    lang, first = code_blocks(text)[0]
    lines = [line.split("#")[0].strip() for line in first.strip().splitlines()]
    assert lines == list(TOP_COMMANDS)
    assert text.index("```") < text.index("\n## "), "the commands come before the first heading"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert TOP_COMMANDS[1].split(" && ", 1)[1] in ci, "CI runs the README's test command"


def test_the_extractor_finds_what_it_should() -> None:
    """The extractor itself: continuation lines, comments, &&, redirections, environment."""
    text = ("```bash\necho 'x' > ~/f && chmod 600 ~/f   # note\n"
            "CUDA_VISIBLE_DEVICES=0 mutransfer sweep lr --widths 1,2 \\\n"
            "    --out runs/lr  # a comment\n```\n"
            "```python\nmutransfer = 1\n```\n")
    assert shell_commands(text) == [["echo", "x"], ["chmod", "600", "~/f"],
                                    ["mutransfer", "sweep", "lr", "--widths", "1,2", "--out", "runs/lr"]]


def test_readme_has_mutransfer_commands() -> None:
    n = sum(mutransfer_argv(argv) is not None for argv in readme_commands())
    assert n >= 15, f"only {n} mutransfer commands found in README.md's code blocks"


@pytest.mark.parametrize("argv", [a for a in docs_commands() if mutransfer_argv(a) is not None],
                         ids=lambda a: " ".join(a)[:80])
def test_every_mutransfer_command_parses(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    args = mutransfer_argv(argv)
    assert args is not None
    verb = next(a for a in args if not a.startswith("-"))
    assert verb in VERBS, f"unknown verb {verb!r} in {' '.join(argv)!r}"
    parser = build_parser(verb)
    try:
        ns = parser.parse_args(args)
    except SystemExit as exc:
        pytest.fail(f"{' '.join(argv)!r} does not parse (exit {exc.code}): {capsys.readouterr().err.strip()}")
    assert ns.verb == verb


@pytest.mark.parametrize("argv", [a for a in docs_commands() if mutransfer_argv(a) is None],
                         ids=lambda a: " ".join(a)[:80])
def test_every_other_command_exists(argv: list[str]) -> None:
    """``python -m MOD`` names an importable module (and pytest's ``-n`` its xdist plugin);
    ``bash FILE`` a file in the repository; anything else a plain shell utility."""
    prog = Path(argv[0]).name
    if prog.startswith("python"):
        assert argv[1] == "-m", f"{' '.join(argv)!r}: run modules with -m"
        module = argv[2]
        assert importlib.util.find_spec(module) is not None, f"no module {module!r}"
        if module == "pytest" and "-n" in argv:
            assert importlib.util.find_spec("xdist") is not None
    elif prog == "bash":
        assert (ROOT / argv[1]).is_file(), f"{argv[1]} is not in the repository"
    else:
        assert prog in {"echo", "chmod", "cat", "ls", "tensorboard", "optuna-dashboard", "pip"}, \
            f"unexpected command {' '.join(argv)!r} in README.md or docs/"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def links(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # links inside code are not links
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_relative_links_resolve_inside_the_repository(path: Path) -> None:
    for link in links(path):
        if re.match(r"[a-z]+:", link):
            continue  # a web address
        target, _, anchor = link.partition("#")
        dest = (path.parent / target).resolve() if target else path
        assert dest.is_relative_to(ROOT), f"{path.name}: {link} points outside the repository"
        assert dest.exists(), f"{path.name}: {link} does not exist"
        if anchor and dest.suffix == ".md":
            heads = re.findall(r"^#+ (.+?)\s*$", re.sub(r"^```.*?^```", "", dest.read_text(encoding="utf-8"),
                                                        flags=re.M | re.S), flags=re.M)
            assert anchor in {slug(h) for h in heads}, f"{path.name}: no heading #{anchor} in {target}"


def test_docs_do_not_point_outside_the_repository() -> None:
    """No absolute path to a file on some machine (``/work/...``, ``/home/...``, ``~/...``
    other than the example storage file)."""
    for path in (README, *DOCS):
        text = path.read_text(encoding="utf-8")
        bad = re.findall(r"(?<![\w.:/])/(?:work|home|tmp|Users)/[\w./-]+", text)
        assert not bad, f"{path.name} points outside the repository: {bad}"
