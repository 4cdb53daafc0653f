"""The public surface (STYLE.md rule 15): every module declares ``__all__`` and each name in
it exists; the package face re-exports the errors and parts; importing the host side pulls in
no server code; every exported class and function is documented."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys

import pytest

import bridge_client
from bridge_client import errors
from bridge_client.wire.parts import PART_TYPES

# Bridge-side modules that may need extras (websockets) or may not be written yet; they are
# checked when they import and skipped when they do not.
OPTIONAL = (
    "bridge_client.bridge.server",
    "bridge_client.bridge.store",
    "bridge_client.bridge.turns",
    "bridge_client.cli",
)
OPTIONAL_PREFIXES = ("bridge_client.drivers.",)


def _module_names():
    names = ["bridge_client"]
    for info in pkgutil.walk_packages(bridge_client.__path__, "bridge_client.", onerror=lambda name: None):
        # A __main__ module runs a program on import: never import it here.
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        names.append(info.name)
    return sorted(set(names))


def _import(name):
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - optional modules may fail for any reason
        if name in OPTIONAL or name.startswith(OPTIONAL_PREFIXES):
            pytest.skip(f"{name} does not import here: {exc!r}")
        raise


def test_the_walk_finds_the_modules_this_file_is_about():
    names = set(_module_names())
    assert {
        "bridge_client",
        "bridge_client.errors",
        "bridge_client.redacted",
        "bridge_client.paths",
        "bridge_client.options",
        "bridge_client.template",
        "bridge_client.wire",
        "bridge_client.wire.frames",
        "bridge_client.wire.parts",
        "bridge_client.wire.rpcs",
        "bridge_client.bridge",
        "bridge_client.state_dir.identity",
        "bridge_client.sandbox",
        "bridge_client.sandbox.base",
        "bridge_client.sandbox.local",
    } <= names


@pytest.mark.parametrize("name", _module_names())
def test_every_module_declares_all_and_every_name_exists(name):
    module = _import(name)
    assert hasattr(module, "__all__"), f"{name} declares no __all__"
    exported = list(module.__all__)
    assert all(isinstance(n, str) for n in exported)
    assert len(exported) == len(set(exported)), f"{name}.__all__ has duplicates"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it lacks: {missing}"


def test_package_all_names_exist_and_are_unique():
    exported = bridge_client.__all__
    assert len(exported) == len(set(exported))
    assert [n for n in exported if not hasattr(bridge_client, n)] == []
    for name in exported:
        assert name in dir(bridge_client)


def test_package_star_import_gives_exactly_all():
    namespace: dict = {}
    exec("from bridge_client import *", namespace)
    namespace.pop("__builtins__")
    assert set(namespace) == set(bridge_client.__all__)


def test_package_re_exports_every_error():
    for name in errors.__all__:
        obj = getattr(errors, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            assert name in bridge_client.__all__, name
            assert getattr(bridge_client, name) is obj


def test_package_re_exports_every_part_type_and_state():
    for cls in PART_TYPES.values():
        assert cls.__name__ in bridge_client.__all__
        assert getattr(bridge_client, cls.__name__) is cls
    for name in ("Part", "TurnState", "SessionState"):
        assert name in bridge_client.__all__


def test_package_re_exports_the_api_md_names():
    for name in (
        "create_session",
        "BridgeOptions",
        "CreateSessionOptions",
        "Workspace",
        "Agent",
        "bridge_agent",
        "Session",
        "Turn",
        "Sandbox",
        "LocalSandbox",
        "Endpoint",
        "ExecResult",
        "Template",
        "bridge_template",
        "Redacted",
        "hmac_token",
    ):
        assert name in bridge_client.__all__, name


def test_importing_the_host_side_pulls_in_no_server_code():
    code = (
        "import sys, bridge_client\n"
        "bridge_client.create_session, bridge_client.LocalSandbox  # the host side loads on use\n"
        "bad = [m for m in sys.modules if m == 'websockets' or m.startswith('websockets.')\n"
        "       or m in ('bridge_client.bridge.server', 'bridge_client.bridge.store',\n"
        "                'bridge_client.bridge.turns')\n"
        "       or m.startswith('bridge_client.drivers')]\n"
        "assert not bad, bad\n"
        "assert 'bridge_client.state_dir.identity' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_library_configures_no_logging():
    code = (
        "import logging, bridge_client\n"
        "assert logging.getLogger().handlers == [], logging.getLogger().handlers\n"
        "handlers = logging.getLogger('bridge_client').handlers\n"
        "assert all(isinstance(h, logging.NullHandler) for h in handlers), handlers\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _doc(obj):
    doc = obj.__doc__
    if not doc or not doc.strip():
        return None
    # dataclasses write "Name(field: type, ...)" as the docstring of an undocumented class.
    if inspect.isclass(obj) and doc.startswith(obj.__name__ + "("):
        return None
    return doc


@pytest.mark.parametrize("name", [n for n in bridge_client.__all__ if not n.startswith("__")])
def test_every_exported_class_and_function_has_a_docstring(name):
    obj = getattr(bridge_client, name)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        assert _doc(obj), f"bridge_client.{name} has no docstring"
