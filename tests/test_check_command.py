"""``manage.py nodeflow_check``: OK on a sound deployment; FAIL (exit 1)
naming what is wrong and how to fix it on a broken one; the settings checks
also run under ``manage.py check --deploy``."""

from __future__ import annotations

import datetime as dt
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from executions.models import DecideRequest
from nodeflow import clock

ROOT = Path(__file__).resolve().parent.parent
GOOD = {
    "SECRET_KEY": "k" * 20 + "-a-long-and-random-enough-secret-value-0123456789",
    "DEBUG": False,
    "ALLOWED_HOSTS": ["nodeflow.example.com"],
    "NODE_FLOW_CIRCUIT_BREAKER": {"enabled": True},
    "NODE_FLOW_WEBHOOK_SECRETS": {"default/partner": "s3cr3t"},
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/15",
}


def run(**settings) -> tuple[int, str]:
    out = io.StringIO()
    with override_settings(**{**GOOD, **settings}):
        try:
            call_command("nodeflow_check", stdout=out)
            code = 0
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue()


def line(output: str, name: str) -> str:
    found = [row for row in output.splitlines() if row[5:].startswith(f"{name}:")]
    assert found, f"no {name} line in:\n{output}"
    return found[0]


@pytest.fixture
def bootstrapped(make_key):
    make_key("admin")


def test_it_says_ok_on_a_sound_setup(bootstrapped):
    code, output = run()
    assert code == 0, output
    assert not [row for row in output.splitlines() if row.startswith("FAIL")], output
    assert output.splitlines()[-1].endswith(", 0 FAIL")
    for name in (
        "database",
        "migrations",
        "broker",
        "namespaces",
        "admin_keys",
        "circuit_breaker",
        "webhook_secrets",
        "secret_key",
        "role decider",
        "role sweeper (timers)",
    ):
        assert line(output, name).startswith("OK"), output
    assert "redis://127.0.0.1:6379/15 reachable" in output


def test_it_warns_of_operator_secrets_without_a_namespace(bootstrapped):
    code, output = run(NODE_FLOW_WEBHOOK_SECRETS={"partner": "s3cr3t", "default/billing": "x"})
    assert code == 0, output
    assert line(output, "webhook_secrets").startswith("WARN")
    assert "without a namespace are ignored" in output and "partner" in output


def test_it_warns_when_postgresql_runs_without_autovacuum(bootstrapped):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("autovacuum is a PostgreSQL setting")
    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        (setting,) = cursor.fetchone()
    code, output = run()
    assert code == 0, output
    if setting == "on":
        assert line(output, "autovacuum").startswith("OK"), output
    else:
        assert line(output, "autovacuum").startswith("WARN") and "VACUUM ANALYZE" in output, output


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0", "nosuchtransport://127.0.0.1/"])
def test_it_fails_when_the_broker_cannot_be_reached(bootstrapped, url):
    code, output = run(CELERY_BROKER_URL=url)
    assert code == 1
    assert line(output, "broker").startswith("FAIL")
    assert "fix: check CELERY_BROKER_URL" in output


@pytest.mark.parametrize(
    "settings, name, message",
    [
        ({"NODE_FLOW_CIRCUIT_BREAKER": '{"enabled": tru'}, "circuit_breaker", "does not parse"),
        (
            {"NODE_FLOW_CIRCUIT_BREAKER": {"enabled": True, "failureRatio": 2}},
            "circuit_breaker",
            "failureRatio must be",
        ),
        ({"NODE_FLOW_CIRCUIT_BREAKER": {"enabeld": True}}, "circuit_breaker", "unknown field(s) enabeld"),
        ({"NODE_FLOW_WEBHOOK_SECRETS": {"partner": 7}}, "webhook_secrets", "not non-empty strings: partner"),
        ({"NODE_FLOW_WEBHOOK_SECRETS": "{not json"}, "webhook_secrets", "not valid JSON"),
        ({"NODE_FLOW_OUTBOUND_DENY": ["10.0.0.0/33"]}, "outbound_deny", "10.0.0.0/33"),
        ({"ALLOWED_HOSTS": []}, "allowed_hosts", "every request gets 400"),
        ({"SECRET_KEY": "nodeflow-insecure-development-key-change-me"}, "secret_key", "forge an admin session"),
    ],
)
def test_it_fails_on_a_bad_setting_and_names_it(bootstrapped, settings, name, message):
    code, output = run(**settings)
    assert code == 1, output
    assert line(output, name).startswith("FAIL") and message in line(output, name), output


def test_the_development_key_is_only_a_warning_on_loopback(bootstrapped):
    code, output = run(SECRET_KEY="nodeflow-insecure-development-key-change-me", ALLOWED_HOSTS=["127.0.0.1"])
    assert code == 0
    assert line(output, "secret_key").startswith("WARN")


def test_it_fails_without_a_namespace_or_an_active_admin_key(db):
    code, output = run()
    assert code == 1
    assert line(output, "namespaces").startswith("FAIL") and "fix: run manage.py nodeflow_bootstrap" in output
    assert line(output, "admin_keys").startswith("FAIL")
    assert "fix: run manage.py nodeflow_apikey create --namespace default --role admin" in output


def test_it_warns_when_a_role_lags_and_strict_makes_a_warning_fail(bootstrapped, frozen_clock):
    DecideRequest.objects.create(execution_id=_an_execution(), due_at=clock.now() - dt.timedelta(minutes=5))
    code, output = run()
    assert code == 0
    assert line(output, "role decider").startswith("WARN") and "waited 300 s" in output
    assert "make sure manage.py nodeflow_decider runs" in output
    with override_settings(**GOOD), pytest.raises(SystemExit) as exited:
        call_command("nodeflow_check", "--strict", stdout=io.StringIO())
    assert exited.value.code == 2


def _an_execution():
    from nodeflow.keys import create_api_key
    from tests.conftest import Api
    from tests.engine_helpers import register, simple, start

    api = Api(create_api_key(role="admin", namespace="default")[1])
    register(api, "one", simple("work"))
    return start(api, "one")["id"]


def test_the_settings_checks_run_under_check_deploy(db):
    bad = {**GOOD, "NODE_FLOW_CIRCUIT_BREAKER": {"failureRatio": 0}}
    with override_settings(**bad), pytest.raises(SystemCheckError, match=r"nodeflow\.circuit_breaker"):
        call_command("check", "--deploy", "--tag", "nodeflow", stdout=io.StringIO(), stderr=io.StringIO())
    with override_settings(**GOOD):
        call_command("check", "--deploy", "--tag", "nodeflow", stdout=io.StringIO(), stderr=io.StringIO())


def test_an_unparsable_setting_in_the_environment_stops_the_command_with_its_name(tmp_path):
    env = {**os.environ, "NODE_FLOW_CIRCUIT_BREAKER": '{"enabled": tru', "DATABASE_URL": f"sqlite:///{tmp_path}/x.db"}
    done = subprocess.run(
        [sys.executable, "manage.py", "nodeflow_check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "NODE_FLOW_CIRCUIT_BREAKER is not valid JSON" in done.stderr
