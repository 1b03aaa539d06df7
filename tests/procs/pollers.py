"""A process of long-polls for tests/test_one_wakeup.py: ``pollers.py QUEUE
COUNT WAIT_S LISTED``. Each of COUNT threads long-polls QUEUE once for up to
WAIT_S (the periodic re-check pushed past that, so only a wake-up can make
a poller look again). It prints ``listed`` once it hears LISTED pollers
parked (every process's; ``listed only N`` and exit 1 if that takes
over 30 s), then, as JSON, each poller's lease statements
(how many tasks each leased)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodeflow.settings")

import django

django.setup()

from django.db import connection  # noqa: E402 - needs django.setup()

from executions import attempts, dispatch, notify  # noqa: E402 - needs django.setup()
from nodeflow.models import Namespace  # noqa: E402 - needs django.setup()


def main() -> None:
    queue, count, wait_s, listed = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    dispatch.LISTEN_RECHECK_S = dispatch.POLL_RECHECK_S = wait_s + 60
    namespace = Namespace.objects.get(name="default")
    leases: dict[int, list[int]] = {}
    lease_queue = attempts.lease_queue

    def counting(*args, **kwargs):
        lease = lease_queue(*args, **kwargs)
        leases.setdefault(threading.get_ident(), []).append(len(lease.tasks))
        return lease

    attempts.lease_queue = counting

    def poll() -> None:
        try:
            dispatch.poll(namespace=namespace, queue=queue, worker_id="w", count=1, wait_s=wait_s)
        finally:
            connection.close()

    threads = [threading.Thread(target=poll) for _ in range(count)]
    for thread in threads:
        thread.start()
    key = notify.queue_key(namespace.id, queue)
    give_up = time.monotonic() + 30
    while notify.parked.listed(key) < listed:  # every process's pollers, as this one hears them
        if time.monotonic() > give_up:
            print(f"listed only {notify.parked.listed(key)}", flush=True)  # a park notice was lost
            sys.exit(1)
        time.sleep(0.01)
    print("listed", flush=True)
    for thread in threads:
        thread.join()
    print(json.dumps(list(leases.values())), flush=True)


if __name__ == "__main__":
    main()
