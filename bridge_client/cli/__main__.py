"""``python -m bridge_client.cli``: the ``bridge-client`` command (:func:`bridge_client.cli.main`)."""
import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
