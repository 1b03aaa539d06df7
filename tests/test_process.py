"""Readying a server process: the URLconf loaded up front, the startup heap
frozen out of the garbage collector, and its thresholds from settings."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from nodeflow import settings as nodeflow_settings
from nodeflow.process import ready_server_process


@pytest.fixture
def restore_gc():
    threshold, interval = gc.get_threshold(), sys.getswitchinterval()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    sys.setswitchinterval(interval)


def test_it_freezes_the_startup_heap_and_sets_the_thresholds(restore_gc, settings):
    settings.NODE_FLOW_GC_THRESHOLD = (12345, 7, 9)
    gc.unfreeze()
    ready_server_process()
    assert gc.get_freeze_count() > 10_000  # Django, the apps and every view module
    assert gc.get_threshold() == (12345, 7, 9)


def test_it_sets_the_gil_switch_interval_from_settings(restore_gc, settings):
    settings.NODE_FLOW_SWITCH_INTERVAL_MS = 0.5
    ready_server_process()
    assert sys.getswitchinterval() == pytest.approx(0.0005)


def test_an_empty_threshold_keeps_the_interpreters_own(restore_gc, settings):
    settings.NODE_FLOW_GC_THRESHOLD = ()
    before = gc.get_threshold()
    ready_server_process()
    assert gc.get_threshold() == before


def test_the_wsgi_module_loads_every_view_before_the_first_request():
    # A fresh interpreter: importing the WSGI module imports the URLconf
    # (and so the console's views), not the first request.
    code = (
        "import sys, nodeflow.wsgi, gc; "
        "print('console.views' in sys.modules, gc.get_freeze_count() > 0, sys.getswitchinterval(), gc.get_threshold())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "NODE_FLOW_GC_THRESHOLD": "40000,15"},
    )
    assert done.stdout.strip().split(maxsplit=3) == ["True", "True", "0.001", "(40000, 15, 10)"]


@pytest.mark.parametrize(
    "raw, expected", [("50000,20,20", (50000, 20, 20)), ("1000", (1000,)), ("", ()), (" 7 , 8 ", (7, 8))]
)
def test_the_threshold_setting_takes_one_to_three_integers(raw, expected):
    assert nodeflow_settings._gc_threshold(raw) == expected


@pytest.mark.parametrize("raw", ["fast", "1,2,3,4", "-5", "1.5"])
def test_a_bad_threshold_setting_names_itself(raw):
    with pytest.raises(ImproperlyConfigured, match="NODE_FLOW_GC_THRESHOLD"):
        nodeflow_settings._gc_threshold(raw)
