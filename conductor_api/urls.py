"""The Conductor-compatible routes, under ``/v1/ns/<ns>/api/`` (a Conductor
client's base URL is ``http://host/v1/ns/default/api``)."""

from django.urls import path

from conductor_api import views

urlpatterns = [
    path("token", views.TokenView.as_view()),
    path("tasks", views.UpdateTaskView.as_view()),
    path("tasks/update-v2", views.UpdateTaskV2View.as_view()),
    path("tasks/poll/batch/<str:task_type>", views.BatchPollView.as_view()),
    path("tasks/poll/<str:task_type>", views.PollView.as_view()),
    path("tasks/<str:task_id>", views.TaskView.as_view()),
    path("tasks/<str:workflow_id>/<str:task_ref>/<str:status>", views.UpdateByReferenceView.as_view()),
    path("tasks/<str:workflow_id>/<str:task_ref>/<str:status>/sync", views.UpdateByReferenceSyncView.as_view()),
    path("metadata/taskdefs", views.TaskDefsView.as_view()),
    path("metadata/taskdefs/<str:name>", views.TaskDefView.as_view()),
    path("metadata/workflow", views.WorkflowDefsView.as_view()),
    path("metadata/workflow/<str:name>", views.WorkflowDefView.as_view()),
    path("workflow", views.StartView.as_view()),
    path("workflow/<str:ident>", views.WorkflowView.as_view()),
    path("workflow/<str:workflow_id>/status", views.WorkflowStatusView.as_view()),
    path("workflow/<str:workflow_id>/pause", views.PauseView.as_view()),
    path("workflow/<str:workflow_id>/resume", views.ResumeView.as_view()),
    path("workflow/<str:workflow_id>/retry", views.RetryView.as_view()),
    path("workflow/<str:workflow_id>/restart", views.RestartView.as_view()),
    path("workflow/<str:name>/correlated", views.CorrelatedBatchView.as_view()),
    path("workflow/<str:name>/correlated/<str:correlation_id>", views.CorrelatedView.as_view()),
]
