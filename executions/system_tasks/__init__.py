"""System tasks: HTTP, HTTP_POLL, WEBHOOK, GRPC, INLINE, JSON_JQ_TRANSFORM.

``base`` is the contract (hooks, outcomes, failures), ``registry`` maps type
names to implementations (one module per type), ``runner`` leases, runs and
reports them, ``outbound`` guards every call that leaves the process, and
``celery_handoff`` hands ready tasks to Celery. See docs/system-tasks.md.
"""
