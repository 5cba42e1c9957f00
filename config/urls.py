from django.contrib import admin
from django.urls import path

from shop import views as shop_views

urlpatterns = [
    path("", shop_views.catalog, name="catalog"),
    path("admin/", admin.site.urls),
]
