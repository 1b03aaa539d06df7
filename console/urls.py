"""Operator pages, under /console/ (see console.views)."""

from django.urls import path

from console import views

app_name = "console"

urlpatterns = [
    path("", views.executions, name="executions"),
    path("executions/<str:execution_id>", views.execution, name="execution"),
    path("controls", views.controls_index, name="controls-index"),
    path("ns/<str:ns>/controls", views.controls, name="controls"),
]
