"""Secrets out of what the project writes and prints: :func:`mask_url` is the one rule
for a URL (a storage, a tracker, a config value), used by the sweeps' storage, the card and
every message that names a URL."""

from __future__ import annotations

import re

__all__ = ["SCHEME", "mask_url", "parsed_secrets"]

#: A URL's scheme and the slashes after it.
SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+):(?P<slashes>/*)")
_SECRET_KEYS = re.compile(r"(?i)((?:^|[?&;])(?:password|passwd|pwd|pass|secret|token|sslpassword|"
                          r"sslkey|api_key|apikey)=)[^&;#]*")


def mask_url(url: str) -> str:
    """``url`` with every secret replaced by ``***``: the password of the user info (also an
    empty user name, ``://:pw@``, and passwords holding ``@`` or ``/``), and query values such
    as ``?password=``. The one function every message and record goes through.

    SQLAlchemy's own parser (:func:`sqlalchemy.engine.make_url`) supplies the password and
    query values it sees, which are then scrubbed wherever they occur; the user info is cut
    at the *last* ``@`` of the authority, so a raw ``@`` in the password cannot leak a tail.
    """
    text = str(url)
    m = SCHEME.match(text)
    if m is None and "@" not in text:
        return text
    # without "//" the first "x:" may be a user name (``user:pw@host``): mask from the start
    cut = m.end() if m is not None and m.group("slashes") else 0
    head, rest = text[:cut], text[cut:]
    main, qmark, query = rest.partition("?")
    at = main.rfind("@")
    if at >= 0:
        user, colon, _ = main[:at].partition(":")
        main = user + (":***" if colon else "") + main[at:]
    if qmark:
        query = _SECRET_KEYS.sub(r"\1***", query)
    masked = head + main + qmark + query
    for secret in parsed_secrets(text):
        if len(secret) >= 3:  # scrub what SQLAlchemy sees too, wherever it shows up
            masked = masked.replace(secret, "***")
    return masked


def parsed_secrets(url: str) -> list[str]:
    """The password and secret query values SQLAlchemy's parser finds in ``url`` (none when
    it is no SQLAlchemy URL, or SQLAlchemy is missing)."""
    try:
        from sqlalchemy.engine import make_url

        u = make_url(url)
    except Exception:  # not an SQLAlchemy URL (or SQLAlchemy missing): the regex did it
        return []
    out = [u.password] if u.password else []
    for k, v in u.query.items():
        if re.fullmatch(r"(?i)password|passwd|pwd|pass|secret|token|sslpassword|api_?key", k):
            out += [v] if isinstance(v, str) else list(v)
    return [str(s) for s in out if s]
