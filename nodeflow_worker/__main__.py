"""Run a worker defined in a module:

    python -m nodeflow_worker examples.worker            # the module's `worker`
    python -m nodeflow_worker mypackage.tasks:my_worker

The module builds a ``Worker`` and registers its functions; this imports it
(from the current directory too) and runs it until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from nodeflow_worker.worker import Worker


def load(target: str) -> Worker:
    module_name, _, attribute = target.partition(":")
    worker = getattr(importlib.import_module(module_name), attribute or "worker", None)
    if not isinstance(worker, Worker):
        raise SystemExit(f"{target}: no Worker named {attribute or 'worker'!r} there")
    return worker


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m nodeflow_worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="module[:attribute] holding the Worker (attribute defaults to 'worker')")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.path.insert(0, "")
    load(args.target).run()


if __name__ == "__main__":
    main()
