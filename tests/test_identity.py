"""Who a bridge is and where it lives: the bridge id (C03), the listening and launch files
(PROTOCOL.md, "Files in the state directory") and atomic 0600 writes (B01)."""
from __future__ import annotations

import hashlib
import json
import os
import stat
import threading

import pytest

from bridge_client.state_dir import identity
from bridge_client.state_dir.identity import (
    BRIDGE_ID_LENGTH,
    LaunchInfo,
    ListeningInfo,
    bridge_id,
    canonical_json,
    parse_launch,
    parse_listening,
    secure_write,
    state_dir,
)
from bridge_client.errors import ProtocolError
from bridge_client.redacted import Redacted, hmac_token
from bridge_client.wire.parts import PROTOCOL_VERSION

TOKEN = hmac_token("shared secret")("local-0123456789abcdef")
BASE = dict(
    agent_id="shell",
    command="python3",
    args=("-m", "bridge_client.bridge", "--driver", "shell"),
    agent_options={"timeout": 600, "model": {"name": "m", "temperature": 0.5}},
    token=TOKEN,
)


def _id(**changes):
    kwargs = {**BASE, **changes}
    return bridge_id(
        kwargs["agent_id"], kwargs["command"], kwargs["args"], kwargs["agent_options"], kwargs["token"]
    )


# ----------------------------------------------------------------------------- bridge id (C03)


def test_c03_bridge_id_is_deterministic():
    first = _id()
    assert first == _id() == _id(token=Redacted(TOKEN.reveal()))
    assert len(first) == BRIDGE_ID_LENGTH == 32
    assert all(c in "0123456789abcdef" for c in first)


def test_c03_args_as_list_or_tuple_give_the_same_id():
    assert _id(args=list(BASE["args"])) == _id(args=tuple(BASE["args"]))


@pytest.mark.parametrize(
    "changes",
    [
        {"agent_id": "echo"},
        {"agent_id": "Shell"},
        {"command": "python3.12"},
        {"command": "/usr/bin/python3"},
        {"args": ("-m", "bridge_client.bridge", "--driver", "echo")},
        {"args": ("-m", "bridge_client.bridge", "--driver")},
        {"args": ("-m", "bridge_client.bridge", "shell", "--driver")},
        {"args": ()},
        {"agent_options": {"timeout": 601, "model": {"name": "m", "temperature": 0.5}}},
        {"agent_options": {"timeout": 600, "model": {"name": "other", "temperature": 0.5}}},
        {"agent_options": {"timeout": 600}},
        {"agent_options": None},
        {"agent_options": {}},
        {"agent_options": {"timeout": "600", "model": {"name": "m", "temperature": 0.5}}},
        {"token": Redacted("another token")},
        {"token": hmac_token("shared secret")("local-fedcba9876543210")},
        {"token": hmac_token("other secret")("local-0123456789abcdef")},
    ],
    ids=repr,
)
def test_c03_bridge_id_differs_when_any_input_differs(changes):
    assert _id(**changes) != _id()


def test_c03_no_ambiguity_between_command_and_args():
    # Canonical JSON keeps boundaries: joining strings differently never collides.
    assert _id(command="python3 -m", args=("x",)) != _id(command="python3", args=("-m", "x"))
    assert _id(args=("a b",)) != _id(args=("a", "b"))
    assert _id(args=("ab",)) != _id(args=("a", "b"))
    assert _id(agent_options=[1, 2]) != _id(agent_options="[1,2]")


def test_c03_key_order_in_agent_options_does_not_matter():
    a = {"a": 1, "b": {"x": [1, {"p": 1, "q": 2}], "y": 2}}
    b = {"b": {"y": 2, "x": [1, {"q": 2, "p": 1}]}, "a": 1}
    assert list(a) != list(b)
    assert _id(agent_options=a) == _id(agent_options=b)
    assert canonical_json(a) == canonical_json(b)


def test_c03_bridge_id_does_not_reveal_the_token():
    token = TOKEN.reveal()
    ident = _id()
    assert token not in ident and ident not in token
    # Not even a fragment of it: no 8-character window of the token appears in the id.
    assert not any(token[i : i + 8] in ident for i in range(len(token) - 7))
    # Nor a plain digest of the token (it must be keyed, mixed with the options).
    for algo in ("sha256", "sha1", "md5", "blake2b"):
        assert hashlib.new(algo, token.encode()).hexdigest()[:BRIDGE_ID_LENGTH] != ident
    assert hashlib.sha256((token + canonical_json({})).encode()).hexdigest()[:BRIDGE_ID_LENGTH] != ident


class _Opaque:
    """A value JSON has no form for, with a repr that is the same in every process."""

    def __repr__(self) -> str:
        return "<opaque>"


@pytest.mark.parametrize(
    "options",
    [
        {1, 2},
        {"k": {1, 2}},
        b"bytes",
        {"k": b"bytes"},
        _Opaque(),
        {"k": _Opaque()},
        float("nan"),
        {"k": float("inf")},
        {"k": float("-inf")},
        {1: "a", "b": 2},  # keys that cannot be sorted
        {("tuple", "key"): 1},
    ],
    ids=repr,
)
def test_c03_non_json_agent_options_raise_type_error(options):
    with pytest.raises(TypeError):
        _id(agent_options=options)


def test_state_dir_is_under_bridges():
    assert state_dir("/home/u/.state/sandboxes/x", "abc") == "/home/u/.state/sandboxes/x/bridges/abc"
    assert state_dir("/r", _id()).endswith("/bridges/" + _id())


# ----------------------------------------------------------------------------- listening.json

LISTENING = ListeningInfo(
    protocol=PROTOCOL_VERSION,
    agent_id="shell",
    bridge_id="0123456789abcdef0123456789abcdef",
    host="127.0.0.1",
    port=45678,
    pid=4242,
    instance="inst-1",
    started_at="2024-05-01T12:00:00Z",
)
LISTENING_OBJ = json.loads(LISTENING.to_json())


def _listening(**changes) -> bytes:
    obj = {**LISTENING_OBJ, **changes}
    return json.dumps({k: v for k, v in obj.items() if v is not _MISSING}).encode()


class _Missing:
    """A key left out of a file; its repr is the same in every process (the test ids of
    pytest-xdist's workers must match)."""

    def __repr__(self) -> str:
        return "MISSING"


_MISSING = _Missing()


def test_listening_file_round_trips():
    assert LISTENING_OBJ == {
        "protocol": 1,
        "agentId": "shell",
        "bridgeId": "0123456789abcdef0123456789abcdef",
        "host": "127.0.0.1",
        "port": 45678,
        "pid": 4242,
        "instance": "inst-1",
        "startedAt": "2024-05-01T12:00:00Z",
    }
    assert parse_listening(LISTENING.to_json().encode()) == LISTENING
    # Key order, spacing and extra keys do not matter.
    pretty = json.dumps(dict(reversed(list({**LISTENING_OBJ, "extra": [1]}.items()))), indent=2).encode()
    assert parse_listening(pretty) == LISTENING


@pytest.mark.parametrize("port", [1, 65535])
def test_listening_ports_at_the_edges_are_accepted(port):
    assert parse_listening(_listening(port=port)).port == port


def _rejected(parse, data, *words):
    with pytest.raises(ProtocolError) as info:
        parse(data)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("cut", [1, 10, 50, -1, -5])
def test_truncated_listening_file_is_rejected(cut):
    data = LISTENING.to_json().encode()
    _rejected(parse_listening, data[:cut], "listening.json", "JSON")


@pytest.mark.parametrize("data", [b"", b"hello", b"\xff\xfe{}", b"{'protocol': 1}", b"NaN"])
def test_listening_file_that_is_not_json_is_rejected(data):
    _rejected(parse_listening, data, "listening.json")


@pytest.mark.parametrize("data", [b"[]", b"1", b"null", b'"x"', b"[{}]"])
def test_listening_file_must_hold_an_object(data):
    _rejected(parse_listening, data, "object")


@pytest.mark.parametrize("protocol", [0, 2, 99])
def test_listening_file_of_another_protocol_is_rejected(protocol):
    _rejected(parse_listening, _listening(protocol=protocol), "protocol")


@pytest.mark.parametrize(
    "key,value",
    [
        ("protocol", "1"),
        ("protocol", True),
        ("protocol", 1.0),
        ("protocol", _MISSING),
        ("agentId", 1),
        ("agentId", ""),
        ("agentId", _MISSING),
        ("bridgeId", None),
        ("host", ["127.0.0.1"]),
        ("host", _MISSING),
        ("port", "45678"),
        ("port", True),
        ("port", 45678.0),
        ("port", None),
        ("port", _MISSING),
        ("pid", "4242"),
        ("pid", 0),
        ("pid", -1),
        ("pid", False),
        ("instance", 7),
        ("instance", _MISSING),
        ("startedAt", 1714564800),
        ("startedAt", _MISSING),
    ],
    ids=repr,
)
def test_listening_file_with_wrong_types_is_rejected(key, value):
    _rejected(parse_listening, _listening(**{key: value}), key)


@pytest.mark.parametrize("port", [0, -1, 65536, 2**31, 10**20])
def test_listening_port_out_of_range_is_rejected(port):
    _rejected(parse_listening, _listening(port=port), "port")


# ----------------------------------------------------------------------------- launch.json

LAUNCH = LaunchInfo(
    agent_id="shell",
    bridge_id="0123456789abcdef0123456789abcdef",
    agent_options={"timeout": 600, "nested": [1, {"a": None}]},
    idle_timeout=600.0,
    bind="127.0.0.1",
)
LAUNCH_OBJ = json.loads(LAUNCH.to_json())


def _launch(**changes) -> bytes:
    obj = {**LAUNCH_OBJ, **changes}
    return json.dumps({k: v for k, v in obj.items() if v is not _MISSING}).encode()


def test_launch_file_round_trips():
    assert LAUNCH_OBJ == {
        "protocol": 1,
        "agentId": "shell",
        "bridgeId": "0123456789abcdef0123456789abcdef",
        "agentOptions": {"timeout": 600, "nested": [1, {"a": None}]},
        "idleTimeout": 600.0,
        "bind": "127.0.0.1",
    }
    assert parse_launch(LAUNCH.to_json().encode()) == LAUNCH


def test_launch_file_defaults():
    info = parse_launch(_launch(bind=_MISSING, agentOptions=_MISSING, idleTimeout=30))
    assert info.bind == "127.0.0.1"
    assert info.agent_options is None
    assert info.idle_timeout == 30.0 and isinstance(info.idle_timeout, float)
    assert parse_launch(_launch(bind="0.0.0.0")).bind == "0.0.0.0"


@pytest.mark.parametrize("cut", [1, 20, -1, -3])
def test_truncated_launch_file_is_rejected(cut):
    _rejected(parse_launch, LAUNCH.to_json().encode()[:cut], "launch.json", "JSON")


@pytest.mark.parametrize("data", [b"", b"launch", b"\xc3\x28", b"[]", b"3"])
def test_launch_file_that_is_not_a_json_object_is_rejected(data):
    _rejected(parse_launch, data, "launch.json")


@pytest.mark.parametrize("protocol", [0, 2, "1", True, _MISSING])
def test_launch_file_of_another_protocol_is_rejected(protocol):
    _rejected(parse_launch, _launch(protocol=protocol), "protocol")


@pytest.mark.parametrize(
    "key,value",
    [
        ("idleTimeout", 0),
        ("idleTimeout", -1),
        ("idleTimeout", "600"),
        ("idleTimeout", True),
        ("idleTimeout", None),
        ("idleTimeout", _MISSING),
        ("bind", ""),
        ("bind", 1),
        ("bind", None),
        ("agentId", _MISSING),
        ("agentId", ""),
        ("bridgeId", 1),
        ("bridgeId", _MISSING),
    ],
    ids=repr,
)
def test_launch_file_with_wrong_types_is_rejected(key, value):
    _rejected(parse_launch, _launch(**{key: value}), key)


def test_launch_file_with_nan_idle_timeout_is_rejected():
    data = LAUNCH.to_json().replace('"idleTimeout":600.0', '"idleTimeout":NaN').encode()
    assert b"NaN" in data
    _rejected(parse_launch, data, "idleTimeout")


@pytest.mark.parametrize("parse", [parse_listening, parse_launch], ids=["listening", "launch"])
def test_deeply_nested_file_is_a_protocol_error(parse):
    _rejected(parse, b"[" * 100_000 + b"]" * 100_000)


# ----------------------------------------------------------------------------- secure_write (B01)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_b01_secure_write_gives_mode_0600_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "listening.json"
    secure_write(str(path), LISTENING.to_json().encode())
    assert _mode(path) == 0o600
    assert path.read_bytes() == LISTENING.to_json().encode()
    assert os.listdir(tmp_path) == ["listening.json"]
    assert parse_listening(path.read_bytes()) == LISTENING


def test_b01_secure_write_mode_does_not_depend_on_the_umask(tmp_path):
    old = os.umask(0)
    try:
        secure_write(str(tmp_path / "a"), b"x")
        secure_write(str(tmp_path / "b"), b"x", mode=0o644)
    finally:
        os.umask(old)
    old = os.umask(0o077)
    try:
        secure_write(str(tmp_path / "c"), b"x", mode=0o644)
    finally:
        os.umask(old)
    assert _mode(tmp_path / "a") == 0o600
    assert _mode(tmp_path / "b") == 0o644
    assert _mode(tmp_path / "c") == 0o644


def test_b01_secure_write_replaces_a_world_readable_file_with_a_0600_one(tmp_path):
    path = tmp_path / "token"
    path.write_bytes(b"old")
    os.chmod(path, 0o644)
    before = os.stat(path).st_ino
    secure_write(str(path), b"new")
    assert path.read_bytes() == b"new"
    assert _mode(path) == 0o600
    # A rename, not an in-place rewrite: readers holding the old file keep the old bytes.
    assert os.stat(path).st_ino != before
    assert sorted(os.listdir(tmp_path)) == ["token"]


def test_b01_secure_write_creates_its_folder_0700(tmp_path):
    path = tmp_path / "abc" / "listening.json"
    secure_write(str(path), b"{}")
    assert path.read_bytes() == b"{}"
    assert _mode(tmp_path / "abc") == 0o700


def test_b01_secure_write_creates_every_missing_parent_folder_0700(tmp_path):
    old = os.umask(0o022)
    try:
        secure_write(str(tmp_path / "bridges" / "abc" / "listening.json"), b"{}")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "bridges" / "abc") == 0o700
    assert _mode(tmp_path / "bridges") == 0o700


def test_b01_secure_write_failure_mid_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "listening.json"
    secure_write(str(path), b"old content")

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(identity.os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        secure_write(str(path), b"new content that never lands")
    monkeypatch.undo()
    assert path.read_bytes() == b"old content"
    assert os.listdir(tmp_path) == ["listening.json"]


def test_b01_secure_write_failed_rename_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "listening.json"
    secure_write(str(path), b"old")

    def broken_replace(src, dst):
        raise OSError(5, "I/O error")

    monkeypatch.setattr(identity.os, "replace", broken_replace)
    with pytest.raises(OSError):
        secure_write(str(path), b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["listening.json"]


def test_b01_secure_write_under_a_folder_that_is_a_file_fails_and_keeps_it(tmp_path):
    blocker = tmp_path / "state"
    blocker.write_bytes(b"I am a file")
    with pytest.raises(OSError):
        secure_write(str(blocker / "listening.json"), b"{}")
    assert blocker.read_bytes() == b"I am a file"
    assert os.listdir(tmp_path) == ["state"]


def test_b01_secure_write_over_a_folder_fails_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / "listening.json"
    target.mkdir()
    (target / "inside").write_bytes(b"kept")
    with pytest.raises(OSError):
        secure_write(str(target), b"{}")
    assert (target / "inside").read_bytes() == b"kept"
    assert os.listdir(tmp_path) == ["listening.json"]


def test_b01_listening_file_readers_never_see_half_a_file(tmp_path):
    path = str(tmp_path / "listening.json")
    versions = [json.dumps({"v": i, "pad": str(i) * 20000}).encode() for i in range(2)]
    secure_write(path, versions[0])
    stop = threading.Event()
    seen = []

    def reader():
        while not stop.is_set():
            with open(path, "rb") as f:
                seen.append(f.read())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        for i in range(40):
            secure_write(path, versions[i % 2])
    finally:
        stop.set()
        thread.join(5)
    assert seen
    assert all(data in versions for data in seen)


def test_optional_read(tmp_path):
    assert identity.optional_read(str(tmp_path / "missing")) is None
    (tmp_path / "f").write_bytes(b"x")
    assert identity.optional_read(str(tmp_path / "f")) == b"x"
