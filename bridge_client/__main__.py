"""``python -m bridge_client``: the ``bridge-client`` command (:func:`bridge_client.cli.main`)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
