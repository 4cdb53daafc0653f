"""Secrets that never show (C01, C17): ``Redacted``, ``hmac_token`` and the per-user secret
file of ``paths.default_secret``."""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import os
import pickle
import stat
import threading
import traceback

import pytest

from bridge_client import paths
from bridge_client.errors import HarnessError
from bridge_client.paths import HOME_ENV, SECRET_ENV, default_secret, user_home
from bridge_client.redacted import Redacted, hmac_token

SECRET = "hunter2-very-secret-value"


# ----------------------------------------------------------------------------- Redacted


def test_redacted_hides_in_repr_str_and_formatting():
    r = Redacted(SECRET)
    shown = [
        repr(r),
        str(r),
        f"{r}",
        f"{r!r}",
        f"{r!s}",
        "%s" % r,
        "%r" % (r,),
        "{}".format(r),
        format(r),
        str([r]),
        repr({"token": r}),
        str((r, r)),
    ]
    for text in shown:
        assert SECRET not in text
        assert "<redacted>" in text


def test_redacted_hides_inside_dataclass_reprs():
    @dataclasses.dataclass
    class Holder:
        token: Redacted

    assert SECRET not in repr(Holder(Redacted(SECRET)))


def test_redacted_hides_in_exception_messages_and_tracebacks():
    r = Redacted(SECRET)

    def fail():
        raise RuntimeError(f"bad token {r}", r)

    with pytest.raises(RuntimeError) as info:
        fail()
    exc = info.value
    assert SECRET not in str(exc) and SECRET not in repr(exc)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    assert SECRET not in text and "<redacted>" in text


def test_redacted_hides_in_log_records(caplog):
    log = logging.getLogger("bridge_client.test")
    with caplog.at_level(logging.DEBUG, logger="bridge_client.test"):
        log.info("token=%s", Redacted(SECRET))
        log.info("token=%r", Redacted(SECRET))
        log.info({"token": Redacted(SECRET)})
    assert len(caplog.records) == 3
    assert SECRET not in caplog.text


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_redacted_refuses_pickle(protocol):
    with pytest.raises(TypeError) as info:
        pickle.dumps(Redacted(SECRET), protocol=protocol)
    assert SECRET not in str(info.value)
    with pytest.raises(TypeError):
        pickle.dumps({"nested": [Redacted(SECRET)]}, protocol=protocol)


def test_redacted_has_no_instance_dict_to_leak():
    r = Redacted(SECRET)
    assert not hasattr(r, "__dict__")
    with pytest.raises(AttributeError):
        r.extra = 1  # type: ignore[attr-defined]


def test_reveal_returns_the_secret():
    assert Redacted(SECRET).reveal() == SECRET


@pytest.mark.parametrize("value", [None, b"bytes", 1, ["s"]], ids=repr)
def test_redacted_takes_only_str(value):
    with pytest.raises(TypeError):
        Redacted(value)  # type: ignore[arg-type]


def test_redacted_refuses_an_empty_secret():
    with pytest.raises(ValueError):
        Redacted("")


def test_redacted_equality_semantics():
    a, b, c = Redacted("same"), Redacted("same"), Redacted("other")
    assert a == b and not (a != b)
    assert a != c and not (a == c)
    assert hash(a) == hash(b)
    assert len({a, b, c}) == 2
    # Never equal to the plain string: comparing does not unwrap it.
    assert a != "same" and "same" != a
    assert Redacted("é✓") == Redacted("é✓")  # non-ASCII is compared as bytes
    assert Redacted("é✓") != Redacted("e✓")
    assert Redacted("abc") != Redacted("abcd")


def test_redacted_compares_with_hmac_compare_digest(monkeypatch):
    calls = []
    real = hmac.compare_digest

    def spy(x, y):
        calls.append((x, y))
        return real(x, y)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert Redacted("one") == Redacted("one")
    assert Redacted("one") != Redacted("two")
    assert len(calls) == 2


def test_redacted_hash_does_not_leak_a_plain_hash_of_the_secret():
    assert hash(Redacted(SECRET)) != hash(SECRET)


# ----------------------------------------------------------------------------- hmac_token


def test_hmac_token_is_hmac_sha256_of_the_sandbox_id():
    token = hmac_token("shared")("local-abc")
    assert isinstance(token, Redacted)
    assert token.reveal() == hmac.new(b"shared", b"local-abc", hashlib.sha256).hexdigest()
    assert len(token.reveal()) == 64


def test_hmac_token_is_deterministic_per_secret_and_sandbox():
    assert hmac_token("shared")("sb-1") == hmac_token("shared")("sb-1")
    fn = hmac_token("shared")
    assert fn("sb-1") == fn("sb-1")


def test_hmac_token_differs_between_sandboxes_and_secrets():
    fn = hmac_token("shared")
    tokens = {fn(f"sb-{i}").reveal() for i in range(50)}
    assert len(tokens) == 50
    assert hmac_token("shared")("sb-1") != hmac_token("other")("sb-1")


def test_hmac_token_takes_str_bytes_or_redacted():
    expected = hmac_token("shared")("sb")
    assert hmac_token(b"shared")("sb") == expected
    assert hmac_token(Redacted("shared"))("sb") == expected
    assert hmac_token(bytearray(b"shared"))("sb") == expected


@pytest.mark.parametrize("secret", ["", b""])
def test_hmac_token_refuses_an_empty_secret(secret):
    with pytest.raises(ValueError):
        hmac_token(secret)


def test_hmac_token_does_not_reveal_the_secret():
    token = hmac_token(SECRET)("sb").reveal()
    assert SECRET not in token
    assert SECRET not in repr(hmac_token(SECRET)("sb"))


# ----------------------------------------------------------------------------- default_secret


@pytest.fixture
def home(tmp_path, monkeypatch):
    folder = tmp_path / "home"
    monkeypatch.setenv(HOME_ENV, str(folder))
    monkeypatch.delenv(SECRET_ENV, raising=False)
    return folder


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_user_home_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "h"))
    assert user_home() == str(tmp_path / "h")
    monkeypatch.delenv(HOME_ENV)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert user_home() == str(tmp_path / "xdg" / "bridge-client")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "u"))
    assert user_home() == str(tmp_path / "u" / ".local" / "state" / "bridge-client")


def test_default_secret_creates_the_file_once_with_mode_0600(home):
    first = default_secret()
    path = home / "secret"
    assert isinstance(first, Redacted)
    assert _mode(path) == 0o600
    assert _mode(home) & 0o077 == 0
    content = path.read_text()
    assert content == first.reveal()
    assert len(content) == 64 and int(content, 16) >= 0
    inode = os.stat(path).st_ino

    second = default_secret()
    assert second == first
    assert path.read_text() == content
    assert os.stat(path).st_ino == inode
    assert os.listdir(home) == ["secret"]


def test_default_secret_differs_between_homes(tmp_path, monkeypatch):
    monkeypatch.delenv(SECRET_ENV, raising=False)
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "a"))
    a = default_secret()
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "b"))
    assert default_secret() != a


def test_default_secret_honours_the_environment(home, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, "from-the-env")
    assert default_secret() == Redacted("from-the-env")
    assert not (home / "secret").exists()


def test_default_secret_keeps_an_existing_file(home):
    home.mkdir()
    (home / "secret").write_text("kept-secret\n")
    os.chmod(home / "secret", 0o600)
    assert default_secret().reveal() == "kept-secret"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o666])
def test_default_secret_refuses_a_file_others_can_read(home, mode):
    home.mkdir()
    path = home / "secret"
    path.write_text("leaky-secret")
    os.chmod(path, mode)
    with pytest.raises(HarnessError) as info:
        default_secret()
    assert str(path) in str(info.value) and "chmod 600" in str(info.value)
    assert "leaky-secret" not in str(info.value)
    assert path.read_text() == "leaky-secret"  # left for the user to fix, not replaced


def test_default_secret_refuses_an_empty_file(home):
    home.mkdir()
    (home / "secret").write_text("")
    os.chmod(home / "secret", 0o600)
    with pytest.raises(HarnessError) as info:
        default_secret()
    assert "empty" in str(info.value)


def test_default_secret_waits_for_a_creator_that_is_still_writing(home):
    # Another process has created the file (O_EXCL) but not yet written the secret.
    home.mkdir()
    path = home / "secret"
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    writer = threading.Timer(0.2, lambda: (os.write(fd, b"late-secret"), os.close(fd)))
    writer.start()
    try:
        assert default_secret().reveal() == "late-secret"
    finally:
        writer.join()


def test_paths_module_names():
    assert paths.HOME_ENV == "BRIDGE_CLIENT_HOME"
    assert paths.SECRET_ENV == "BRIDGE_CLIENT_SECRET"
