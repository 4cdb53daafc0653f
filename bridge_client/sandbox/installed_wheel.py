"""A wheel of this package rebuilt from its installed files, for sandboxes that lack it.

A host that installed ``bridge-client`` from a wheel (not from a source tree) has no sources
to build from; asking a package index for ``bridge-client==VERSION`` instead would install
whatever someone published under that name into every sandbox. The installed distribution
already holds everything a wheel holds: its files, listed in the ``RECORD`` of its
``.dist-info`` folder, and that folder's metadata. :func:`installed_wheel` zips them again
(without the installer's own files and the byte-code) into a wheel that installs exactly the
code the host runs.

The wheel is built once per content digest and kept in the wheel cache (see
:func:`~bridge_client.sandbox.wheelhouse.wheel_cache_dir`).
"""
from __future__ import annotations

import base64
import hashlib
import os
import posixpath
import shutil
import tempfile
import zipfile
from typing import List, Tuple

from ..errors import TemplateError

__all__ = ["installed_wheel"]

_DIST = "bridge-client"
_STEP = "the bridge program (bridge_client[bridge], from wheels built on the host)"
# Written by the installer, not part of the wheel (pip writes them again when it installs).
_INSTALLER_FILES = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json", "RECORD.jws", "RECORD.p7s"}
_DEFAULT_WHEEL = (
    "Wheel-Version: 1.0\nGenerator: bridge-client (rebuilt from the installed files)\n"
    "Root-Is-Purelib: true\nTag: py3-none-any\n"
)
_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: the same files make the same wheel


def _package_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _installed_files() -> Tuple[str, str, List[Tuple[str, str]]]:
    """Return (version, dist-info folder name, [(path in the wheel, path on disk)]).

    Raises:
        TemplateError: the running package is not an installed distribution with a RECORD.
    """
    from importlib import metadata

    try:
        dist = metadata.distribution(_DIST)
    except metadata.PackageNotFoundError:
        raise TemplateError(
            f"cannot give the sandbox this package: bridge_client runs from {_package_dir()}, which is "
            f"neither a source tree nor an installed {_DIST} distribution (pip install it, or pass "
            "bridge_template(requirement=...) to say what to install)",
            step=_STEP,
        ) from None
    here = os.path.realpath(os.path.join(_package_dir(), "__init__.py"))
    there = os.path.realpath(str(dist.locate_file("bridge_client/__init__.py")))
    if here != there:
        raise TemplateError(
            f"the installed {_DIST} {dist.version} (at {there}) is not the bridge_client that runs "
            f"({here}): install this one, or run from its source tree",
            step=_STEP,
        )
    records = dist.files
    if not records:
        raise TemplateError(f"the installed {_DIST} has no RECORD listing its files", step=_STEP)
    info_dir = next(
        (str(r.parent) for r in records if r.name == "METADATA" and str(r.parent).endswith(".dist-info")),
        None,
    )
    if info_dir is None:
        raise TemplateError(f"the installed {_DIST} has no .dist-info metadata", step=_STEP)
    files: List[Tuple[str, str]] = []
    for record in records:
        name = posixpath.normpath(str(record).replace(os.sep, "/"))
        if name.startswith("../") or name.startswith("/"):
            continue  # console scripts: pip makes them again from entry_points.txt
        if "__pycache__" in name.split("/") or name.endswith((".pyc", ".pyo")):
            continue
        if posixpath.dirname(name) == info_dir and posixpath.basename(name) in _INSTALLER_FILES:
            continue
        path = str(record.locate())
        if not os.path.isfile(path):
            raise TemplateError(
                f"the installed {_DIST} lacks {name} (listed in its RECORD): reinstall it", step=_STEP
            )
        files.append((name, path))
    return str(dist.version), info_dir, sorted(files)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _wheel_tag(wheel_file: bytes) -> str:
    for line in wheel_file.decode("utf-8", "replace").splitlines():
        if line.startswith("Tag:"):
            return line.split(":", 1)[1].strip()
    return "py3-none-any"


def installed_wheel(cache: str) -> str:
    """Return the path of a wheel of the installed ``bridge-client`` that runs this code,
    rebuilt from its installed files (built once per content digest, under ``cache``).

    Args:
        cache: the host folder where wheels are kept (it exists).

    Raises:
        TemplateError: the running package is not an installed distribution (an egg, a copy
            on ``sys.path``), it is another copy than the one installed, or a file its RECORD
            lists is missing.
    """
    version, info_dir, files = _installed_files()
    contents = []
    digest = hashlib.sha256()
    for name, path in files:
        with open(path, "rb") as f:
            data = f.read()
        contents.append((name, data))
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    wheel_name = posixpath.join(info_dir, "WHEEL")
    if not any(name == wheel_name for name, _ in contents):
        contents.append((wheel_name, _DEFAULT_WHEEL.encode()))
    tag = _wheel_tag(next(data for name, data in contents if name == wheel_name))
    final = os.path.join(cache, f"package-{version}-installed-{digest.hexdigest()[:16]}")
    filename = f"bridge_client-{version}-{tag}.whl"
    if os.path.isfile(os.path.join(final, filename)):
        return os.path.join(final, filename)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=cache)
    try:
        record_name = posixpath.join(info_dir, "RECORD")
        with zipfile.ZipFile(os.path.join(tmp, filename), "w", zipfile.ZIP_DEFLATED) as wheel:
            lines = []
            for name, data in sorted(contents):
                info = zipfile.ZipInfo(name, _EPOCH)
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                wheel.writestr(info, data)
                lines.append(_record_line(name, data))
            lines.append(f"{record_name},,")
            info = zipfile.ZipInfo(record_name, _EPOCH)
            info.external_attr = 0o644 << 16
            wheel.writestr(info, "\n".join(lines) + "\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        os.rename(tmp, final)
    except OSError:  # another builder's copy won; it holds the same files
        if not os.path.isdir(final):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    return os.path.join(final, filename)
