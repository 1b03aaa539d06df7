"""The README's example worker: serves the `charge` and `notify` tasks of the
walk-through's `checkout` workflow.

    NF_URL=http://127.0.0.1:8000 NF_API_KEY=nf_… .venv/bin/python -m examples.worker

(or `.venv/bin/python -m nodeflow_worker examples.worker`). Stop it with
Ctrl-C or SIGTERM: tasks in flight finish and report first.
"""

from __future__ import annotations

import logging
import os

from nodeflow_worker import Task, TerminalError, Worker

worker = Worker(os.environ.get("NF_URL", "http://127.0.0.1:8000"), os.environ["NF_API_KEY"], concurrency=8)


@worker.task("charge")
def charge(task: Task) -> dict:
    amount = task.input.get("amount")
    if not isinstance(amount, (int, float)) or amount <= 0:
        # Retrying cannot fix bad input: fail for good (no retry).
        raise TerminalError(f"amount must be a positive number, not {amount!r}", code="INVALID_ARGUMENT")
    # A real charge passes the idempotency key to the payment provider, so a
    # retried or re-delivered attempt never charges twice.
    return {"id": f"ch_{task.idempotency_key[-12:]}", "amount": amount}


@worker.task("notify", concurrency=2)
def notify(task: Task) -> dict:
    task.log(f"notifying about charge {task.input.get('chargeId')}")
    return {"sent": True}


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    worker.run()
