"""Run a user's code in a child process that cannot outlive this one.

User code (a ``module:function`` model builder or audit entry, its module's top level
included) may ``sys.exit``, ``os._exit``, hang or crash. :func:`run_child` runs one of our
functions, which calls it, in a fresh ``python`` child and returns its answer, or why there
was none: so none of that can end or hang the verb, and the verb exits 2 with one line.

The child is a plain subprocess (no ``multiprocessing``: no resource tracker to orphan). It
asks the kernel to SIGKILL it when this process dies (``PR_SET_PDEATHSIG`` on Linux), then
checks its parent is still the one that started it, so a ``kill -9`` of the verb leaves no
child behind; the timeout kills it otherwise. Its answer is JSON on a pipe of its own, never
its stdout (which the user's code may print to).
"""

from __future__ import annotations

import json
import math
import os
import pickle
import select
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

#: Seconds a model builder may take in its child when the CLI checks it.
DEFAULT_BUILD_TIMEOUT = 300.0

_CHILD = "from mutransfer.contain import _child_main; _child_main()"
#: Set (to seconds) while a CLI verb runs: a ``module:function`` model builder is then first
#: imported and built in a child (:func:`check_builder`), and so are the sweep workers it spawns.
BUILD_TIMEOUT_ENV = "MUTRANSFER_BUILD_TIMEOUT"


#: What a child writes once it has imported our code, before it runs the user's.
_READY = b"R"
#: Seconds a child may take to import our code (torch) before the user's code starts.
STARTUP_S = 120.0
#: The longest build timeout taken (a week): past it a hang is a hang.
MAX_BUILD_TIMEOUT = 7 * 86400.0


def build_timeout() -> float | None:
    """Seconds of :data:`BUILD_TIMEOUT_ENV` (None when unset or empty): a positive number
    up to :data:`MAX_BUILD_TIMEOUT`; anything else (0, -1, nan, abc) is a ValueError naming
    the variable, never a builder blamed for a timeout it could not meet."""
    text = os.environ.get(BUILD_TIMEOUT_ENV, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and 0 < value <= MAX_BUILD_TIMEOUT):
        raise ValueError(f"${BUILD_TIMEOUT_ENV}={text!r} must be a positive number of seconds, at most "
                         f"{MAX_BUILD_TIMEOUT:g} (a week)")
    return value


class UserCodeError(ValueError):
    """The user's code or setup failed: a model builder (or entry point) raised, exited,
    hung or returned the wrong thing, or a tracker (``--track``, ``$MUTRANSFER_TRACK``)
    could not start. A ValueError (one line, exit 2 in the CLI); its own type so a sweep
    can tell it from a trial's own failure: it fails every trial the same way, so the
    worker stops and the verb names it instead of counting failed trials."""


class Outcome:
    """What a child run gave: ``kind`` is ``done`` (``value`` is the function's JSON
    answer), ``timeout``, or ``ended`` (no answer; ``exit_code`` is the child's)."""

    __slots__ = ("exit_code", "kind", "value")

    def __init__(self, kind: str, value: Any = None, exit_code: int | None = None) -> None:
        self.kind, self.value, self.exit_code = kind, value, exit_code


def run_child(func: Callable[[Mapping[str, Any]], Any], options: Mapping[str, Any],
              timeout: float) -> Outcome:
    """Call ``func(options)`` (a module-level function of ours, which must return JSON-able
    data) in a child process, within ``timeout`` seconds."""
    target = f"{func.__module__}:{func.__qualname__}"
    r, w = os.pipe()
    env = {k: v for k, v in os.environ.items() if k != BUILD_TIMEOUT_ENV}  # no grandchild
    env["MUTRANSFER_CONTAIN_PARENT"] = str(os.getpid())
    try:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(w), target], stdin=subprocess.PIPE,
                                pass_fds=(w,), env=env)
    finally:
        os.close(w)
    try:
        assert proc.stdin is not None
        try:
            # the parent's import path (a folder the caller added): the child imports what it would
            proc.stdin.write(pickle.dumps({"options": dict(options), "sys_path": list(sys.path)}))
            proc.stdin.close()
        except BrokenPipeError:  # the child is gone already: its exit code says why
            pass
        data = bytearray()
        # the clock of the user's code starts once the child has imported ours (torch can
        # take longer than a short timeout on a busy machine: it is not the builder's hang)
        deadline = time.monotonic() + max(timeout, STARTUP_S)
        started = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return Outcome("timeout")
            ready, _, _ = select.select([r], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            if not started:
                started, chunk = True, chunk[len(_READY):]
                deadline = time.monotonic() + timeout
            data += chunk
        if not data:
            try:
                code = proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            return Outcome("ended", exit_code=code)
        return Outcome("done", json.loads(data.decode("utf-8")))
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(r)


def die_with_parent() -> None:
    """In a child of :func:`run_child`: SIGKILL when the parent dies (Linux), and exit now
    if it died before this line."""
    parent = os.environ.get("MUTRANSFER_CONTAIN_PARENT", "")
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if parent.isdigit() and os.getppid() != int(parent):
        os._exit(1)


def _child_main() -> None:
    fd, target = int(sys.argv[1]), sys.argv[2]
    die_with_parent()
    import importlib

    sent = pickle.load(sys.stdin.buffer)  # from our parent, never from a file
    options = sent["options"]
    sys.path[:] = [p for p in sent["sys_path"] if isinstance(p, str)] + [
        p for p in sys.path if p not in sent["sys_path"]]
    module, _, name = target.partition(":")
    func = getattr(importlib.import_module(module), name)
    os.write(fd, _READY)  # our imports are done: the user's code starts now
    answer = func(options)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(answer, fh, default=float)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # a thread the user's code left running cannot hold the child
