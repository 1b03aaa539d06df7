"""Operator pages (SPEC §10): executions, one execution as a graph, and a
namespace's controls. For logged-in staff only; anyone else is sent to the
admin login. Thin: parse, call ``console.pages``, render."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from console import forms, graph, pages
from nodeflow.errors import InvalidField


@require_GET
@staff_member_required
def executions(request: HttpRequest) -> HttpResponse:
    form = forms.ExecutionFilterForm(request.GET)
    context = {"form": form, "rows": [], "next_query": None, "colours": graph.EXECUTION_COLOURS}
    if not form.is_valid():
        return render(request, "console/executions.html", context, status=400)
    data = form.cleaned_data
    try:
        rows, cursor = pages.list_executions(
            filters=form.filters(), cursor=data.get("cursor") or None, limit=data.get("limit") or forms.PAGE_SIZE
        )
    except InvalidField as exc:
        form.add_error("cursor", exc.message)
        return render(request, "console/executions.html", context, status=400)
    context.update(
        rows=rows,
        next_query=_with(request, cursor=cursor) if cursor else None,
        first_query=_with(request, cursor=None) if data.get("cursor") else None,
    )
    return render(request, "console/executions.html", context)


@require_GET
@staff_member_required
def execution(request: HttpRequest, execution_id: str) -> HttpResponse:
    found = pages.find_execution(execution_id)
    if found is None:
        return render(request, "console/missing.html", {"what": f"execution {execution_id}"}, status=404)
    context = pages.execution_page(found)
    context.update(
        colours=graph.STATUS_COLOURS,
        text_colours={s: graph.text_colour(s) for s in graph.STATUS_COLOURS},
        execution_colours=graph.EXECUTION_COLOURS,
    )
    return render(request, "console/execution.html", context)


@require_GET
@staff_member_required
def controls_index(request: HttpRequest) -> HttpResponse:
    first = pages.first_namespace()
    if first is None:
        return render(request, "console/missing.html", {"what": "any namespace"}, status=404)
    return redirect("console:controls", ns=first.name)


@require_GET
@staff_member_required
def controls(request: HttpRequest, ns: str) -> HttpResponse:
    namespace = pages.find_namespace(ns)
    if namespace is None:
        return render(request, "console/missing.html", {"what": f"namespace {ns}"}, status=404)
    form = forms.QueueFilterForm(request.GET)
    if not form.is_valid():
        refused = {"namespace": namespace, "namespaces": pages.namespace_names(), "form": form, "queues": []}
        return render(request, "console/controls.html", refused, status=400)
    context = pages.controls_page(namespace, **form.query())
    queues = context["queue_page"]
    context.update(
        form=form,
        namespaces=pages.namespace_names(),
        previous_query=_with(request, page=str(queues.page - 1)) if queues.page > 1 else None,
        next_query=_with(request, page=str(queues.page + 1)) if queues.page < queues.pages else None,
    )
    return render(request, "console/controls.html", context)


def _with(request: HttpRequest, **changes) -> str:
    """This page's query string with ``changes`` (None removes a parameter)."""
    query = request.GET.copy()
    for key, value in changes.items():
        query.pop(key, None)
        if value is not None:
            query[key] = value
    return query.urlencode()
