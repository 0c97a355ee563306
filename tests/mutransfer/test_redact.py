"""One redaction rule (``mutransfer.redact``): the forms of a secret an audit found leaking
through the card's old rule, each masked whole, and what is no secret left alone."""

from __future__ import annotations

import pytest

from mutransfer.redact import is_secret_key, mask_url, redact, redact_argv, redact_text

S = "S3CRETXYZ"


@pytest.mark.parametrize(("text", "want"), [
    (f"https://bob:{S}@RETAT@hub.example.com/m", "https://bob:***@hub.example.com/m"),  # '@' in the password
    (f"http://carol:pa/{S}@proxy:8080", "http://carol:***@proxy:8080"),  # '/' in the password
    (f"postgresql://u@h/db?password={S}", "postgresql://u@h/db?password=***"),
    (f"alice:{S}@db.example.com", "alice:***@db.example.com"),  # no scheme
    (f"--storage=postgresql://postgres:{S}@127.0.0.1:5432/db",
     "--storage=postgresql://postgres:***@127.0.0.1:5432/db"),
    (f"see https://u:{S}@h/x and api_key={S} here", "see https://u:***@h/x and api_key=*** here"),
    (f"sqlite:///db.sqlite?password={S}", "sqlite:///db.sqlite?password=***"),
])
def test_every_form_of_a_password_in_text_is_masked_whole(text, want) -> None:
    assert redact_text(text) == want and S not in redact_text(text)


@pytest.mark.parametrize("text", ["bos_token_id=1", "lr=0.01", "hf:/models/llama", "bob@example.com",
                                  "https://example.com/a?b=c", "10:30"])
def test_text_without_a_secret_is_unchanged(text) -> None:
    assert redact_text(text) == text


def test_redact_text_is_as_strong_as_mask_url_on_a_url() -> None:
    for url in (f"postgresql://u:{S}@h/db", f"mysql://:{S}@h/db", f"https://a:b@{S}@h/x?token={S}"):
        assert S not in mask_url(url) and S not in redact_text(url)


@pytest.mark.parametrize(("key", "secret"), [
    ("myApiKey", True), ("passphrase", True), ("token_hf", True), ("hf_token", True), ("api_key", True),
    ("DB_PASSWORD", True), ("privateKey", True), ("use_auth_token", True), ("client-secret", True),
    ("bos_token_id", False), ("token_type_ids", False), ("max_tokens", False), ("vocab_size", False),
    ("tokenizer_class", False), ("auth_type", False), ("keys", False),
])
def test_secret_key_names(key, secret) -> None:
    assert is_secret_key(key) is secret


def test_redact_a_config_drops_secret_keys_and_masks_values_and_says_where() -> None:
    doc = {"myApiKey": S, "passphrase": S, "token_hf": S, "bos_token_id": 1,
           "proxy": f"http://carol:pa/{S}@proxy:8080", "nested": {"db": f"alice:{S}@db"},
           "urls": [f"postgresql://u@h/db?password={S}"], "plain": "keep me", "hf_token": None}
    clean, notes = redact(doc)
    assert S not in repr(clean) and doc["passphrase"] == S  # a copy: the input is unchanged
    assert clean["bos_token_id"] == 1 and clean["plain"] == "keep me" and clean["hf_token"] is None
    assert sorted(notes) == ["myApiKey (dropped)", "nested.db (URL password masked)",
                             "passphrase (dropped)", "proxy (URL password masked)", "token_hf (dropped)",
                             "urls[0] (URL password masked)"]


def test_redact_argv_masks_urls_and_the_value_after_a_secret_flag() -> None:
    argv = ["sweep", "lr", "--storage", f"postgresql://p:{S}@h/db", f"--storage=mysql://p:{S}@h/db",
            "--password", S, "--hf-token", S, "--lr", "0.01"]
    out = redact_argv(argv)
    assert S not in " ".join(out)
    assert out[:3] == argv[:3] and out[-2:] == ["--lr", "0.01"] and out[5:9] == ["--password", "***",
                                                                                  "--hf-token", "***"]
