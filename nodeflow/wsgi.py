"""WSGI entry point: ``granian --interface wsgi nodeflow.wsgi:application``
or ``gunicorn nodeflow.wsgi`` (docs/deployment.md), and ``nodeflow_run``'s server."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodeflow.settings")
application = get_wsgi_application()

from nodeflow.process import ready_server_process  # noqa: E402 - needs Django set up
from nodeflow.wsgi_bodies import with_request_bodies  # noqa: E402 - needs Django set up

application = with_request_bodies(application)

ready_server_process()
