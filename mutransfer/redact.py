"""Secrets out of what the project writes and prints: :func:`mask_url` is the one rule
for a URL (a storage, a tracker, a config value), used by the sweeps' storage, the card and
every message that names a URL; :func:`redact_text` applies it to every URL-like word of
free text (an argv, a log line), :func:`is_secret_key` is the one list of key names that
hold a credential, and :func:`redact` cleans a whole JSON document (a card's model config,
a tracker's run config) with both."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["SCHEME", "is_secret_key", "mask_url", "parsed_secrets", "redact", "redact_argv", "redact_text"]

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


#: Words that make a key name a credential wherever they stand in it (``myApiKey``,
#: ``passphrase``, ``token_hf``, ``hf_token``, ``DB_PASSWORD``).
_SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "pwd", "passphrase", "apikey",
                           "credential", "credentials", "auth", "authorization", "cookie", "sslpassword",
                           "sslkey", "privatekey", "accesskey", "secretkey", "bearer"})
#: Two words that together name one (``api_key``, ``access-key``, ``privateKey``).
_SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"),
                           ("client", "secret"), ("session", "key")})
#: A last word that makes the key a number or a setting about tokens, not a credential
#: (``bos_token_id``, ``token_type_ids``, ``auth_type``).
_BENIGN_LAST = frozenset({"id", "ids", "index", "idx", "type", "types", "size", "count", "num", "len",
                          "length", "dropout", "class", "prob", "rate", "ratio", "embedding", "embeddings",
                          "limit", "position", "positions", "method", "mode", "required", "enabled",
                          "kind", "scheme", "file", "path", "env", "var", "name"})
#: Values shaped like well-known API tokens (Hugging Face, OpenAI, GitHub, AWS, Slack).
_TOKEN_VALUE = re.compile(r"^(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|"
                          r"AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,})$")
#: URL-like words of free text: ``scheme://...``, and ``user:pw@host`` without a scheme.
_URLISH = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+|[^\s'\"<>/:=@]+:[^\s'\"<>]*@[^\s'\"<>]+")
#: ``key=value`` of a secret key anywhere in free text (``--set api_key=...``).
_KEY_VALUE = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9_.-]*)(?P<eq>=)(?P<value>[^\s&;#'\"]+)")


def _words(key: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key)  # myApiKey -> my_Api_Key
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def is_secret_key(key: object) -> bool:
    """Whether a config key or flag name names a credential: one of its words (split at
    ``_``, ``-``, ``.`` and camelCase) is a secret word (``token``, ``password``,
    ``passphrase``, ``apikey``, ``auth``...) or two adjacent words are (``api key``,
    ``access key``), unless its last word makes it a count or a setting (``bos_token_id``,
    ``token_type_ids``, ``max_tokens`` is no secret word)."""
    words = _words(str(key))
    if not words or words[-1] in _BENIGN_LAST:
        return False
    return any(w in _SECRET_WORDS for w in words) or any(p in _SECRET_PAIRS for p in zip(words, words[1:]))


def redact_text(text: str) -> str:
    """``text`` with every URL-like word masked by :func:`mask_url` (a password in the user
    info, also with ``@`` or ``/`` in it, ``?password=`` and the like, ``user:pw@host``
    without a scheme) and the value of every ``key=value`` whose key is a secret
    (:func:`is_secret_key`) replaced by ``***``."""
    out = _URLISH.sub(lambda m: mask_url(m.group()), str(text))
    return _KEY_VALUE.sub(lambda m: m.group("key") + "=***" if is_secret_key(m.group("key")) else m.group(),
                          out)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line without secrets: each word through :func:`redact_text`, and the word
    after a flag that names a secret (``--password X``, ``--hf-token X``) replaced by ``***``."""
    out: list[str] = []
    for i, word in enumerate(argv):
        prev = argv[i - 1] if i else ""
        if prev.startswith("-") and "=" not in prev and is_secret_key(prev.lstrip("-")):
            out.append("***")
        else:
            out.append(redact_text(word))
    return out


def redact(doc: Any, path: str = "") -> tuple[Any, list[str]]:
    """``doc`` (JSON data) without credentials: a key naming one (:func:`is_secret_key`)
    or a value shaped like an API token is dropped, a secret in a string (a URL's
    password, ``user:pw@host``, ``?password=``, ``api_key=...``) is masked as ``***``
    (:func:`redact_text`); returns (the clean copy, the dotted paths dropped or masked,
    each with what was done). ``doc`` itself is not changed."""
    notes: list[str] = []
    if isinstance(doc, dict):
        out: dict[Any, Any] = {}
        for k, v in doc.items():
            p = f"{path}.{k}" if path else str(k)
            if is_secret_key(k) and v not in (None, "", False):
                notes.append(f"{p} (dropped)")
                continue
            out[k], sub = redact(v, p)
            notes += sub
        return out, notes
    if isinstance(doc, (list, tuple)):
        items = [redact(v, f"{path}[{i}]") for i, v in enumerate(doc)]
        return [v for v, _ in items], [n for _, sub in items for n in sub]
    if isinstance(doc, str):
        if _TOKEN_VALUE.match(doc.strip()):
            return None, [f"{path} (dropped: a token)"]
        masked = redact_text(doc)
        if masked != doc:
            return masked, [f"{path} (URL password masked)"]
    return doc, notes
