"""Routes. The API lives under ``/v1/ns/{ns}/``; see SPEC.md."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from nodeflow.metrics import metrics_view
from nodeflow.secret_views import SecretDetailView, SecretListView
from nodeflow.views import HealthView

urlpatterns = [
    path("healthz", HealthView.as_view(), name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("admin/", admin.site.urls),
    path("api-auth/", include("rest_framework.urls")),
    path("console/", include("console.urls")),
    path("v1/ns/<str:ns>/metadata/", include("metadata.urls")),
    path("v1/ns/<str:ns>/api/", include("conductor_api.urls")),
    path("v1/ns/<str:ns>/", include("executions.urls")),
    path("v1/ns/<str:ns>/", include("quotas.urls")),
    path("v1/ns/<str:ns>/secrets", SecretListView.as_view()),
    path("v1/ns/<str:ns>/secrets/<str:name>", SecretDetailView.as_view()),
]

handler400 = "nodeflow.errors.handler400"
handler404 = "nodeflow.errors.handler404"
handler500 = "nodeflow.errors.handler500"
