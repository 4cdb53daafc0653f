"""Under tox the suite tests the installed wheel, not the source folder."""
from __future__ import annotations

import os

import pytest

import bridge_client

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(
    not os.environ.get("BRIDGE_CLIENT_TEST_INSTALLED"), reason="only under tox (the installed wheel)"
)
def test_tox_imports_the_installed_package_not_the_source_folder():
    here = os.path.realpath(bridge_client.__file__)
    source = os.path.realpath(os.path.join(ROOT, "bridge_client")) + os.sep
    assert not here.startswith(source), here
    assert f"{os.sep}site-packages{os.sep}" in here
