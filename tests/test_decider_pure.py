"""The decider, the retry policy and the expression evaluators import and
run without Django: checked in a fresh interpreter whose environment names
no settings module (this test process has Django configured already)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FRAMEWORKS = ("django", "nodeflow", "celery", "rest_framework")

# A SWITCH on a javascript expression, then a SIMPLE task: the first decision;
# then which of the frameworks named in argv the interpreter has loaded.
SCRIPT = """
import datetime as dt, json, sys, uuid

import executions.decider, executions.javascript, executions.retry, metadata.expressions
from executions.decider.snapshot import Snapshot

def task(type, ref, **fields):
    return {"name": ref, "taskReferenceName": ref, "type": type, "inputParameters": {}, "optional": False, **fields}

route = task("SWITCH", "route", inputParameters={"n": "${workflow.input.n}"}, evaluatorType="javascript",
             expression="$.n > 3 ? 'big' : 'small'", decisionCases={"big": [task("SIMPLE", "charge")]},
             defaultCase=[])
workflow = {"name": "wf", "tasks": [route, task("SIMPLE", "ship")], "variables": {}, "outputParameters": {},
            "timeoutSeconds": 0, "maxConcurrentTasks": 0}
ids = iter(range(1, 100))
snap = Snapshot(execution_id=uuid.UUID(int=1), status="RUNNING", workflow=workflow, workflows={}, input={"n": 5},
                variables={}, rows=[], now=dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc), task_defs={})
decision = executions.decider.decide(snap, rand=lambda: 0.5, make_id=lambda: uuid.UUID(int=next(ids)))
print(json.dumps({
    "created": [[row.path, row.type, row.status] for row in decision.created],
    "policy": decision.created[1].policy == executions.retry.DEFAULT_POLICY,
    "loaded": sorted(name for name in sys.modules if name.split(".")[0] in sys.argv[1:]),
}))
"""


def run_fresh(script: str, *args: str) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr  # checked here, to show the traceback
    return json.loads(done.stdout)


def test_it_decides_in_an_interpreter_without_django():
    assert run_fresh(SCRIPT, *FRAMEWORKS) == {
        "created": [["route", "SWITCH", "COMPLETED"], ["charge", "SIMPLE", "SCHEDULED"]],
        "policy": True,
        "loaded": [],
    }
