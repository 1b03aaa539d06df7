from django.urls import path

from executions import breaker_views, views, worker_api

urlpatterns = [
    path("executions", views.ExecutionListView.as_view()),
    path("executions/batch", views.ExecutionBatchView.as_view()),
    path("executions/<str:execution_id>", views.ExecutionDetailView.as_view()),
    path("executions/<str:execution_id>/tasks", views.ExecutionTasksView.as_view()),
    path("executions/<str:execution_id>/terminate", views.TerminateView.as_view()),
    path("executions/<str:execution_id>/pause", views.PauseView.as_view()),
    path("executions/<str:execution_id>/resume", views.ResumeView.as_view()),
    path("executions/<str:execution_id>/retry", views.RetryView.as_view()),
    path("executions/<str:execution_id>/restart", views.RestartView.as_view()),
    path("executions/<str:execution_id>/decide", views.DecideView.as_view()),
    path("executions/<str:execution_id>/messages", views.MessagesView.as_view()),
    path("tasks/poll/<str:task_type>", worker_api.PollView.as_view()),
    path("tasks/results", worker_api.BatchResultsView.as_view()),
    path("tasks/<str:task_id>/heartbeat", worker_api.HeartbeatView.as_view()),
    path("tasks/<str:task_id>/result", worker_api.ResultView.as_view()),
    path("webhooks/<str:name>", worker_api.WebhookView.as_view()),
    path("breakers", breaker_views.BreakersView.as_view()),
]
