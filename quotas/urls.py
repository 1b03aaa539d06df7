from django.urls import path

from quotas import views

urlpatterns = [
    path("semaphores", views.SemaphoreListView.as_view()),
    path("semaphores/<str:name>", views.SemaphoreDetailView.as_view()),
    path("quotas", views.QuotasView.as_view()),
    path("schedules", views.ScheduleListView.as_view()),
    path("schedules/<str:name>", views.ScheduleDetailView.as_view()),
    path("schedules/<str:name>/pause", views.SchedulePauseView.as_view()),
    path("schedules/<str:name>/resume", views.ScheduleResumeView.as_view()),
    path("queues", views.QueueListView.as_view()),
    path("queues/workers", views.QueueWorkersView.as_view()),
    path("queues/<str:task_type>/depth", views.QueueDepthView.as_view()),
]
