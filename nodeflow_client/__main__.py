"""``python -m nodeflow_client``: the command line (nodeflow_client/cli.py, docs/client.md)."""

import sys

from nodeflow_client.cli import main

if __name__ == "__main__":
    sys.exit(main())
