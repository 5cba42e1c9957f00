from django.conf import settings
from django.contrib import admin
from django.contrib.auth.views import LoginView, LogoutView
from django.urls import include, path, re_path
from django.views.static import serve
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from config import error_views
from config.auth_api import TokenObtainApi, TokenRevokeApi, login_throttled
from config.error_views import API_PREFIX
from inventory import apis as inventory_apis
from orders import apis as order_apis
from orders import views as order_views
from orders import webhooks as payment_webhooks
from shop import apis as shop_apis
from shop import views as shop_views


class SwaggerUiView(SpectacularSwaggerSplitView):
    """The Swagger UI page, GET only: drf-spectacular's view answers OPTIONS with a 500 (no template for it).

    The split view serves its init script from a URL (``?script``), so the page needs no inline script
    under the Content-Security-Policy; ``templates/drf_spectacular/swagger_ui.html`` drops its inline style.
    """

    http_method_names = ["get", "head"]


api_patterns = [
    path("products/", shop_apis.ProductListApi.as_view(), name="product-list"),
    path("products/<str:sku>/", shop_apis.ProductDetailApi.as_view(), name="product-detail"),
    path("checkout/quote/", order_apis.CheckoutQuoteApi.as_view(), name="checkout-quote"),
    path("orders/", order_apis.OrderCollectionApi.as_view(), name="order-list"),
    path("orders/<str:number>/", order_apis.OrderDetailApi.as_view(), name="order-detail"),
    path("orders/<str:number>/pay/", order_apis.OrderPayApi.as_view(), name="order-pay"),
    path("orders/<str:number>/cancel/", order_apis.OrderCancelApi.as_view(), name="order-cancel"),
    path("orders/<str:number>/refund/", order_apis.OrderRefundApi.as_view(), name="order-refund"),
    path("orders/<str:number>/ship/", order_apis.OrderShipApi.as_view(), name="order-ship"),
    path("inventory/<str:sku>/", inventory_apis.StockDetailApi.as_view(), name="stock-detail"),
    path("inventory/<str:sku>/movements/", inventory_apis.StockMovementListApi.as_view(), name="stock-movements"),
    path("auth/token/", TokenObtainApi.as_view(), name="auth-token"),
    path("auth/token/revoke/", TokenRevokeApi.as_view(), name="auth-token-revoke"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SwaggerUiView.as_view(url_name="api:schema"), name="docs"),
]

urlpatterns = [
    path("", shop_views.catalog, name="catalog"),
    path("products/<str:sku>/", shop_views.product_detail, name="product"),
    path("categories/<slug:slug>/", shop_views.category_detail, name="category"),
    path("cart/", shop_views.cart_view, name="cart"),
    path("cart/add/<str:sku>/", shop_views.cart_add_view, name="cart-add"),
    path("cart/update/<str:sku>/", shop_views.cart_update_view, name="cart-update"),
    path("checkout/", order_views.checkout, name="checkout"),
    path("orders/", order_views.order_list, name="order-list"),
    path("orders/<str:number>/", order_views.order_detail, name="order-detail"),
    path("orders/<str:number>/pay/", order_views.order_pay_view, name="order-pay"),
    path("orders/<str:number>/cancel/", order_views.order_cancel_view, name="order-cancel"),
    path("orders/<str:number>/to-cart/", order_views.order_to_cart_view, name="order-to-cart"),
    path("payments/<str:provider>/webhook/", payment_webhooks.provider_webhook, name="payment-webhook"),
    path("payments/local/<str:reference>/", payment_webhooks.local_checkout, name="local-checkout"),
    # Login and logout only: the shop sends no email, so Django's password-reset pages (which would
    # mail through an unconfigured server, unthrottled) are not routed. The admin's login is
    # routed ahead of admin.site.urls so that it does not escape the throttle either.
    path("accounts/login/", login_throttled(LoginView.as_view()), name="login"),
    path("accounts/logout/", LogoutView.as_view(), name="logout"),
    path("admin/login/", login_throttled(admin.site.login)),
    path("admin/", admin.site.urls),
    path(API_PREFIX.lstrip("/"), include((api_patterns, "api"))),
]

handler400 = error_views.bad_request
handler403 = error_views.permission_denied
handler404 = error_views.page_not_found
handler500 = error_views.server_error


def media_file(request, path: str):
    """Product images kept on local disk, served by the shop (an S3-compatible store serves its own)."""
    return serve(request, path, document_root=settings.MEDIA_ROOT)


if settings.STORAGES["default"]["BACKEND"] == "django.core.files.storage.FileSystemStorage":
    urlpatterns.append(re_path(r"^media/(?P<path>.*)$", media_file))
