"""The executions list's filters, from the query string. A bad value is a
400 that names the field, shown on the page."""

from __future__ import annotations

from django import forms

from executions.models import ExecutionStatus
from nodeflow.models import Namespace

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
QUEUES_PER_PAGE = 50
# <input type="datetime-local"> sends minutes, or seconds when given a step.
DATETIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"]


class ExecutionFilterForm(forms.Form):
    namespace = forms.ChoiceField(required=False)
    name = forms.CharField(required=False, max_length=128, label="Workflow")
    status = forms.ChoiceField(required=False, choices=[("", "any"), *ExecutionStatus.choices])
    correlationId = forms.CharField(required=False, max_length=256, label="Correlation id")
    since = forms.DateTimeField(
        required=False,
        input_formats=DATETIME_FORMATS,
        label="Created from (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    until = forms.DateTimeField(
        required=False,
        input_formats=DATETIME_FORMATS,
        label="Created before (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    limit = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_SIZE, widget=forms.HiddenInput)
    cursor = forms.CharField(required=False, max_length=200, widget=forms.HiddenInput)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        names = Namespace.objects.order_by("name").values_list("name", flat=True)
        self.fields["namespace"].choices = [("", "all"), *((name, name) for name in names)]

    def clean(self) -> dict:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since >= until:
            self.add_error("until", "must be later than 'Created from'")
        return data

    def filters(self) -> dict:
        data = self.cleaned_data
        return {
            "namespace": data.get("namespace"),
            "name": data.get("name"),
            "status": data.get("status"),
            "correlation_id": data.get("correlationId"),
            "since": data.get("since"),
            "until": data.get("until"),
        }

    def errors_by_field(self) -> list[tuple[str, str]]:
        """(query parameter, message) of each error, for the page and its tests."""
        return [(field, message) for field, messages in self.errors.items() for message in messages]


class QueueFilterForm(forms.Form):
    """The controls page's queue list: a name filter, held back only, and
    pages (a namespace may have seen thousands of queues)."""

    queue = forms.CharField(required=False, max_length=128, label="Queue name contains")
    held = forms.BooleanField(required=False, label="Held back only")
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    limit = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_SIZE, widget=forms.HiddenInput)

    def query(self) -> dict:
        data = self.cleaned_data
        return {
            "name": data.get("queue") or "",
            "held": bool(data.get("held")),
            "page": data.get("page") or 1,
            "per_page": data.get("limit") or QUEUES_PER_PAGE,
        }

    def errors_by_field(self) -> list[tuple[str, str]]:
        return [(field, message) for field, messages in self.errors.items() for message in messages]
