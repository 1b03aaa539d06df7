from django.urls import path

from metadata import views

urlpatterns = [
    path("task-definitions", views.TaskDefinitionListView.as_view()),
    path("task-definitions/<str:name>", views.TaskDefinitionDetailView.as_view()),
    path("workflow-definitions", views.WorkflowDefinitionListView.as_view()),
    path("workflow-definitions/<str:name>", views.WorkflowDefinitionDetailView.as_view()),
    path("workflow-definitions/<str:name>/versions", views.WorkflowVersionListView.as_view()),
    path("workflow-definitions/<str:name>/versions/<int:version>", views.WorkflowVersionDetailView.as_view()),
    path("workflow-definitions/<str:name>/publish", views.WorkflowPublishView.as_view()),
    path("workflow-definitions/<str:name>/rollback", views.WorkflowRollbackView.as_view()),
]
