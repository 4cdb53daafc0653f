"""Install this package in a sandbox from wheels built on the host.

A container usually has Python but neither this package nor a network. :class:`WheelStep`
builds a wheel of the package the host runs (from its source tree when there is one, else
rebuilt from its installed files: never fetched by name from a package index), gets
the wheels of its dependencies, of the ``bridge`` extra (``websockets``) and of ``pip``
itself for the sandbox's Python version and platform, copies them in with
``Sandbox.write_file`` and runs ``pip install --no-index`` inside the sandbox from the copied
``pip`` wheel. Nothing inside the sandbox needs a network, nor pip of its own.

Wheels are cached on the host under ``$XDG_CACHE_HOME/bridge-client/wheelhouse`` (default
``~/.cache/bridge-client/wheelhouse``; ``BRIDGE_CLIENT_WHEEL_CACHE`` overrides it): the
package's wheel per digest of its sources (or of its installed files), the dependencies per
target (Python version, machine, C library) and requirement list. Only the first build for a
target reaches the package index (with the host's pip, as configured), for the dependencies;
later ones work offline.
"""
from __future__ import annotations

import email.parser
import hashlib
import json
import logging
import os
import posixpath
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .. import __version__
from ..errors import SandboxGone, TemplateError
from .base import ExecResult, Sandbox
from .template_step import TemplateStep, announce_install, output_tail

__all__ = ["WheelStep", "Target", "wheel_cache_dir", "build_wheelhouse"]

log = logging.getLogger("bridge_client")

CACHE_ENV = "BRIDGE_CLIENT_WHEEL_CACHE"
"""Environment variable naming the host folder where wheels are cached."""

_STEP = "the bridge program (bridge_client[bridge], from wheels built on the host)"
_DIST = "bridge-client"
# Files of the source tree that a wheel build reads (setup.cfg names README.md).
_TREE_FILES = ("setup.cfg", "setup.py", "pyproject.toml", "README.md", "MANIFEST.in", "LICENSE")
_PROBE = (
    "import json, platform, sys; "
    "print(json.dumps({'impl': sys.implementation.name, 'version': list(sys.version_info[:2]), "
    "'machine': platform.machine(), 'libc': list(platform.libc_ver())}))"
)


# Runs pip (argv[3:]) under an exclusive lock on argv[1], unless the check (argv[2]) passes
# once the lock is held: hosts that launch at once in one sandbox install one at a time, once.
_LOCKED_INSTALL = (
    "import fcntl, subprocess, sys\n"
    "with open(sys.argv[1], 'a') as lock:\n"
    "    fcntl.flock(lock, fcntl.LOCK_EX)\n"
    "    if subprocess.call([sys.executable, '-c', sys.argv[2]]) == 0:\n"
    "        sys.exit(0)\n"
    "    sys.exit(subprocess.call([sys.executable] + sys.argv[3:]))\n"
)


def wheel_cache_dir() -> str:
    """Return the host folder where wheels are cached (not created here).

    ``$BRIDGE_CLIENT_WHEEL_CACHE``, else ``$XDG_CACHE_HOME/bridge-client/wheelhouse``, else
    ``~/.cache/bridge-client/wheelhouse``.
    """
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return os.path.abspath(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "bridge-client", "wheelhouse")


@dataclass(frozen=True)
class Target:
    """The Python a sandbox runs, as pip's ``download`` needs it.

    Attributes:
        impl: ``sys.implementation.name`` there (only ``"cpython"`` gets compiled wheels).
        version: ``(major, minor)``.
        machine: ``platform.machine()`` there (``"x86_64"``, ``"aarch64"``).
        libc: ``("glibc", "2.36")``, ``("musl", "1.2")`` or ``("", "")`` when unknown.
    """

    impl: str
    version: Tuple[int, int]
    machine: str
    libc: Tuple[str, str]

    @property
    def key(self) -> str:
        """A folder name for this target's wheels."""
        libc = f"{self.libc[0] or 'nolibc'}{self.libc[1]}"
        return f"{self.impl}{self.version[0]}{self.version[1]}-{self.machine}-{libc}"

    def pip_download_args(self) -> List[str]:
        """The ``pip download`` options that select wheels for this target."""
        ver = f"{self.version[0]}{self.version[1]}"
        args = ["--only-binary=:all:", "--python-version", f"{self.version[0]}.{self.version[1]}"]
        if self.impl == "cpython":
            args += ["--implementation", "cp", "--abi", f"cp{ver}", "--abi", "abi3", "--abi", "none"]
            platforms: List[str] = []
            minor = _minor(self.libc[1])
            if self.libc[0] == "glibc" and minor is not None:
                platforms += [f"manylinux_2_{m}_{self.machine}" for m in range(minor, 16, -1)]
                platforms += [f"manylinux2014_{self.machine}"]
                if self.machine in ("x86_64", "i686"):
                    platforms += [f"manylinux2010_{self.machine}", f"manylinux1_{self.machine}"]
            elif self.libc[0] == "musl" and minor is not None:
                platforms += [f"musllinux_1_{m}_{self.machine}" for m in range(minor, -1, -1)]
            for platform in platforms:
                args += ["--platform", platform]
            if not platforms:  # unknown C library: pure-Python wheels only
                args += ["--platform", "any"]
        else:
            args += ["--implementation", "py", "--abi", "none", "--platform", "any"]
        return args


def _minor(version: str) -> Optional[int]:
    try:
        return int(version.split(".")[1])
    except (IndexError, ValueError):
        return None


def _source_tree() -> Optional[str]:
    """The folder holding this package's setup files, when it runs from a source tree."""
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = os.path.dirname(package_dir)
    if os.path.isfile(os.path.join(root, "setup.cfg")) and os.path.basename(package_dir) == "bridge_client":
        return root
    return None


def _tree_digest(root: str) -> Tuple[str, List[str]]:
    files = [name for name in _TREE_FILES if os.path.isfile(os.path.join(root, name))]
    for folder, dirs, names in os.walk(os.path.join(root, "bridge_client")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if not name.endswith((".pyc", ".pyo")):
                files.append(os.path.relpath(os.path.join(folder, name), root))
    digest = hashlib.sha256()
    for rel in files:
        digest.update(rel.encode() + b"\0")
        with open(os.path.join(root, rel), "rb") as f:
            digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()[:16], files


def _run_pip(args: Sequence[str], what: str, timeout: float) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TemplateError(f"{what}: pip ran longer than {timeout:g} s on the host", step=_STEP) from None
    except OSError as exc:
        raise TemplateError(f"{what}: cannot run pip on the host: {exc}", step=_STEP) from None
    if done.returncode != 0:
        out = (done.stdout + done.stderr)[-2000:].decode("utf-8", "replace").strip()
        raise TemplateError(f"{what} failed on the host (pip exit {done.returncode})", step=_STEP, output=out)


def _publish(tmp: str, final: str) -> None:
    """Move a finished folder into place; a concurrent builder's copy wins, ours is dropped."""
    try:
        os.rename(tmp, final)
    except OSError:
        if not os.path.isdir(final):
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def _package_wheel(cache: str, timeout: float) -> str:
    """Return the path of a wheel of the running package: built from its source tree (once per
    source digest), or rebuilt from its installed files."""
    root = _source_tree()
    if root is None:
        # An installed release: the wheel is rebuilt from the installed files, never fetched
        # by name from an index (where anyone may publish under that name).
        from .installed_wheel import installed_wheel

        return installed_wheel(cache)
    # A source tree: build from a copy of it.
    digest, files = _tree_digest(root)
    final = os.path.join(cache, f"package-{__version__}-{digest}")
    if not os.path.isdir(final):
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=cache)
        try:
            # Build from a copy: a build writes build/ and *.egg-info next to its sources.
            src = os.path.join(tmp, "src")
            for rel in files:
                os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
                shutil.copy2(os.path.join(root, rel), os.path.join(src, rel))
            out = os.path.join(tmp, "out")
            base = ["wheel", "--no-deps", "--quiet", "-w", out]
            try:
                _run_pip([*base, "--no-build-isolation", src], "building the package's wheel", timeout)
            except TemplateError:  # no setuptools/wheel here: let pip fetch them
                _run_pip([*base, src], "building the package's wheel", timeout)
            shutil.rmtree(src)
            for name in os.listdir(out):
                os.rename(os.path.join(out, name), os.path.join(tmp, name))
            os.rmdir(out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _publish(tmp, final)
    wheels = [n for n in os.listdir(final) if n.endswith(".whl")]
    if len(wheels) != 1:
        raise TemplateError(f"expected one wheel of {_DIST} in {final}, found {wheels}", step=_STEP)
    return os.path.join(final, wheels[0])


def _requires(wheel: str) -> List[str]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        msg = email.parser.BytesParser().parsebytes(zf.read(meta))
    return sorted(msg.get_all("Requires-Dist") or [])


def build_wheelhouse(
    target: Target, *, extras: Sequence[str] = ("bridge",), timeout: float = 600.0
) -> List[str]:
    """Return host paths of every wheel a sandbox of ``target`` needs: this package, its
    dependencies with ``extras``, and ``pip``.

    Raises:
        TemplateError: a wheel cannot be built or downloaded (offline with an empty cache,
            a dependency with no wheel for ``target``).
    """
    cache = wheel_cache_dir()
    os.makedirs(cache, exist_ok=True)
    package = _package_wheel(cache, timeout)
    spec = json.dumps({"requires": _requires(package), "extras": sorted(extras), "target": target.key})
    digest = hashlib.sha256(spec.encode()).hexdigest()[:16]
    deps = os.path.join(cache, f"deps-{target.key}-{digest}")
    if not os.path.isdir(deps):
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=cache)
        try:
            extra = f"[{','.join(extras)}]" if extras else ""
            _run_pip(
                ["download", "--quiet", "-d", tmp, *target.pip_download_args(), f"{package}{extra}", "pip"],
                f"downloading wheels for Python {target.version[0]}.{target.version[1]} on {target.machine}",
                timeout,
            )
            for name in os.listdir(tmp):  # the package itself is kept apart (per source digest)
                if name == os.path.basename(package):
                    os.remove(os.path.join(tmp, name))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _publish(tmp, deps)
    return [package] + sorted(os.path.join(deps, n) for n in os.listdir(deps) if n.endswith(".whl"))


def _check_code() -> str:
    return (
        "import sys, bridge_client, bridge_client.bridge.server; "
        f"sys.exit(0 if bridge_client.__version__ == {__version__!r} else 3)"
    )


@dataclass(frozen=True)
class WheelStep(TemplateStep):
    """A template step that installs this package and its ``bridge`` extra in a sandbox
    that has Python but not the package, from wheels built on the host and copied in:
    nothing is downloaded inside the sandbox. ``Template.run`` calls its
    :meth:`run`.

    Attributes:
        name: what the step provides, for messages.
        check: imports ``bridge_client.bridge.server`` in the sandbox and compares the
            version with this package's.
        install: only describes what :meth:`run` does.
        timeout: seconds for each host build and each command in the sandbox.
        remember: set by :meth:`for_python`: once installed (or found) at this version, a
            marker in the sandbox's state root spares later launches the check.
        python: the sandbox's interpreter that will run the bridge (``"python3"``).
        extras: the package's extras to install (``("bridge",)``: ``websockets``).
        bridge_version: the version installed (this package's; set by :meth:`for_python`).
    """

    python: str = "python3"
    extras: Tuple[str, ...] = ("bridge",)
    bridge_version: str = ""

    @property
    def proven_by_bridge(self) -> bool:
        """Whether a bridge program of ``bridge_version`` that starts with this step's
        interpreter shows the step is done (when the step names a version), so a launcher
        that hears the bridge say its version (see
        :meth:`~bridge_client.template.Template.run`, ``defer``) may skip the check."""
        return bool(self.bridge_version)

    @classmethod
    def for_python(cls, python: str = "python3", extras: Tuple[str, ...] = ("bridge",)) -> "WheelStep":
        """The step for the interpreter ``python`` in the sandbox."""
        extra = f"[{','.join(extras)}]" if extras else ""
        return cls(
            name=_STEP,
            check=(python, "-c", _check_code()),
            install=(python, "<copied pip wheel>/pip", "install", "--no-index", "--find-links",
                     "<copied wheels>", f"{_DIST}{extra}=={__version__}"),
            python=python,
            extras=tuple(extras),
            remember=True,  # the check starts an interpreter: a marker saves it on later launches
            bridge_version=__version__,
        )

    def _run_in(
        self, sandbox: Sandbox, argv: Sequence[str], env: Optional[Dict[str, str]] = None
    ) -> ExecResult:
        try:
            return sandbox.exec(argv, env=env, timeout=self.timeout)
        except SandboxGone:
            raise
        except FileNotFoundError:
            raise TemplateError(
                f"the sandbox has no Python: {self.python!r} was not found there; "
                "use an image with Python 3.9 or newer, or pass its path as python=",
                step=_STEP,
            ) from None
        except TimeoutError:
            raise TemplateError(
                f"{argv[0]} ran longer than {self.timeout:g} s in the sandbox", step=_STEP
            ) from None
        except OSError as exc:
            raise TemplateError(
                f"cannot run {argv[0]} in the sandbox: {exc.strerror or exc}", step=_STEP
            ) from None

    def _installed(self, sandbox: Sandbox) -> bool:
        return self._run_in(sandbox, list(self.check)).ok

    def target(self, sandbox: Sandbox) -> Target:
        """Ask the sandbox's Python what it is.

        Raises:
            TemplateError: there is no such Python, or it is older than 3.9.
        """
        probe = self._run_in(sandbox, [self.python, "-c", _PROBE])
        try:
            info = json.loads(probe.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
            target = Target(
                info["impl"],
                (int(info["version"][0]), int(info["version"][1])),
                str(info["machine"]),
                (str(info["libc"][0]), str(info["libc"][1])),
            )
        except (ValueError, IndexError, KeyError, TypeError):
            raise TemplateError(
                f"{self.python!r} in the sandbox is not a working Python (exit {probe.exit_code})",
                step=_STEP,
                output=output_tail(probe),
            ) from None
        if target.version < (3, 9):
            raise TemplateError(
                f"{self.python!r} in the sandbox is Python {target.version[0]}.{target.version[1]}; "
                "the bridge needs 3.9 or newer",
                step=_STEP,
            )
        return target

    def run(self, sandbox: Sandbox) -> None:
        """Install the package in ``sandbox`` unless it is there at this version.

        Raises:
            TemplateError: no Python in the sandbox (or older than 3.9), wheels that cannot
                be built or fetched on the host, or ``pip install`` failing in the sandbox.
            SandboxGone: the sandbox is gone.
        """
        if self._installed(sandbox):
            return
        target = self.target(sandbox)
        wheels = build_wheelhouse(target, extras=self.extras, timeout=self.timeout)
        folder = posixpath.join(
            sandbox.state_root, "wheelhouse", os.path.basename(os.path.dirname(wheels[0]))
        )
        log.debug("template: copying %d wheels into %s", len(wheels), folder)
        for path in wheels:
            with open(path, "rb") as f:
                sandbox.write_file(posixpath.join(folder, os.path.basename(path)), f.read(), mode=0o644)
        pip = next((os.path.basename(p) for p in wheels if os.path.basename(p).startswith("pip-")), None)
        if pip is None:
            raise TemplateError("no pip wheel was fetched for the sandbox", step=_STEP)
        extra = f"[{','.join(self.extras)}]" if self.extras else ""

        announce_install(
            f"{_DIST}{extra}=={__version__} (pip, from {len(wheels)} wheels copied into {folder})",
            f"the Python environment of {self.python} in the sandbox {sandbox.id}",
        )
        argv = [
            self.python,
            "-c",
            _LOCKED_INSTALL,
            posixpath.join(sandbox.state_root, "wheelhouse", ".install.lock"),
            self.check[-1],
            posixpath.join(folder, pip, "pip"),
            "install",
            "--quiet",
            "--no-index",
            "--find-links",
            folder,
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--no-warn-script-location",
            "--break-system-packages",
            f"{_DIST}{extra}=={__version__}",
        ]
        installed = self._run_in(sandbox, argv, env={"PIP_ROOT_USER_ACTION": "ignore", "PIP_NO_INPUT": "1"})
        if not installed.ok:
            raise TemplateError(
                f"installing {_DIST}{extra} in the sandbox failed (pip exit {installed.exit_code})",
                step=_STEP,
                output=output_tail(installed),
            )
        if not self._installed(sandbox):
            raise TemplateError(
                f"bridge_client {__version__} is still not importable by {self.python!r} after installing it",
                step=_STEP,
            )
