from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from django.views.static import serve
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from accounts import apis as account_apis
from accounts import views as account_views
from accounts.forms import LoginForm, ResetForm
from config import error_views, health, metrics
from config.auth_api import TokenObtainApi, TokenRevokeApi, login_throttled
from config.error_views import API_PREFIX
from drops import apis as drop_apis
from drops import views as drop_views
from fulfilment import apis as fulfilment_apis
from fulfilment import views as fulfilment_views
from inventory import apis as inventory_apis
from orders import apis as order_apis
from orders import hold_views
from orders import views as order_views
from payments import apis as payment_apis
from payments import views as payment_views
from payments import webhooks as payment_webhooks
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
    path("orders/<str:number>/pay/", payment_apis.OrderPayApi.as_view(), name="order-pay"),
    path("orders/<str:number>/checkout/", hold_views.HoldCheckoutApi.as_view(), name="order-hold-checkout"),
    path("drops/<int:pk>/line/", drop_apis.DropLineApi.as_view(), name="drop-line"),
    path("drops/<int:pk>/news/", drop_apis.DropNewsApi.as_view(), name="drop-news"),
    path("orders/<str:number>/cancel/", order_apis.OrderCancelApi.as_view(), name="order-cancel"),
    path("orders/<str:number>/refund/", payment_apis.OrderRefundApi.as_view(), name="order-refund"),
    path("orders/<str:number>/ship/", fulfilment_apis.OrderShipApi.as_view(), name="order-ship"),
    path("orders/<str:number>/returns/", fulfilment_apis.OrderReturnApi.as_view(), name="order-returns"),
    path("returns/<int:pk>/accept/", fulfilment_apis.ReturnAcceptApi.as_view(), name="return-accept"),
    path("returns/<int:pk>/refuse/", fulfilment_apis.ReturnRefuseApi.as_view(), name="return-refuse"),
    path("inventory/<str:sku>/", inventory_apis.StockDetailApi.as_view(), name="stock-detail"),
    path("inventory/<str:sku>/movements/", inventory_apis.StockMovementListApi.as_view(), name="stock-movements"),
    path("accounts/signup/", account_apis.SignupApi.as_view(), name="account-signup"),
    path("accounts/verify/", account_apis.VerifyApi.as_view(), name="account-verify"),
    path("accounts/verify/resend/", account_apis.VerifyResendApi.as_view(), name="account-verify-resend"),
    path("accounts/password-reset/", account_apis.PasswordResetApi.as_view(), name="account-password-reset"),
    path(
        "accounts/password-reset/confirm/",
        account_apis.PasswordResetConfirmApi.as_view(),
        name="account-password-reset-confirm",
    ),
    path("accounts/me/", account_apis.MeApi.as_view(), name="account-me"),
    path("accounts/addresses/", account_apis.AddressListApi.as_view(), name="account-addresses"),
    path("accounts/addresses/<int:address_id>/", account_apis.AddressDetailApi.as_view(), name="account-address"),
    path("auth/token/", TokenObtainApi.as_view(), name="auth-token"),
    path("auth/token/revoke/", TokenRevokeApi.as_view(), name="auth-token-revoke"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SwaggerUiView.as_view(url_name="api:schema"), name="docs"),
]

urlpatterns = [
    path("", shop_views.catalog, name="catalog"),
    path("favicon.ico", shop_views.favicon, name="favicon"),
    path("products/<str:sku>/", shop_views.product_detail, name="product"),
    path("categories/<slug:slug>/", shop_views.category_detail, name="category"),
    path("cart/", shop_views.cart_view, name="cart"),
    path("cart/add/<str:sku>/", shop_views.cart_add_view, name="cart-add"),
    path("cart/update/<str:sku>/", shop_views.cart_update_view, name="cart-update"),
    path("checkout/", order_views.checkout, name="checkout"),
    path("orders/", order_views.order_list, name="order-list"),
    path("orders/<str:number>/", fulfilment_views.order_detail, name="order-detail"),
    path("orders/<str:number>/pay/", payment_views.order_pay_view, name="order-pay"),
    path("orders/<str:number>/checkout/", hold_views.hold_checkout, name="hold-checkout"),
    path("drops/<int:pk>/", drop_views.drop_line, name="drop"),
    path("orders/<str:number>/cancel/", order_views.order_cancel_view, name="order-cancel"),
    path("orders/<str:number>/to-cart/", order_views.order_to_cart_view, name="order-to-cart"),
    path("orders/<str:number>/return/", fulfilment_views.order_return_view, name="order-return"),
    path("payments/<str:provider>/webhook/", payment_webhooks.provider_webhook, name="payment-webhook"),
    path("payments/local/<str:reference>/", payment_webhooks.local_checkout, name="local-checkout"),
    # Every form that guesses at accounts (logging in, signing up, new links, password resets) is behind
    # the login throttle; the admin's login is routed ahead of admin.site.urls so that it does not escape it.
    path(
        "accounts/login/",
        login_throttled(auth_views.LoginView.as_view(authentication_form=LoginForm)),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/signup/", login_throttled(account_views.signup, field="email"), name="signup"),
    path(
        "accounts/verify/resend/",
        login_throttled(account_views.verify_resend, field="email"),
        name="account-verify-resend",
    ),
    path("accounts/verify/<str:token>/", account_views.verify, name="account-verify"),
    path("accounts/", account_views.account, name="account"),
    path("accounts/addresses/new/", account_views.address_edit, name="account-address-new"),
    path("accounts/addresses/<int:pk>/", account_views.address_edit, name="account-address"),
    path("accounts/addresses/<int:pk>/delete/", account_views.address_delete, name="account-address-delete"),
    path(
        "accounts/password-reset/",
        login_throttled(auth_views.PasswordResetView.as_view(form_class=ResetForm), field="email"),
        name="password_reset",
    ),
    path("accounts/password-reset/sent/", auth_views.PasswordResetDoneView.as_view(), name="password_reset_done"),
    path("accounts/reset/<uidb64>/<token>/", account_views.ResetConfirmView.as_view(), name="password_reset_confirm"),
    path("accounts/reset/done/", auth_views.PasswordResetCompleteView.as_view(), name="password_reset_complete"),
    path("accounts/password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("accounts/password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
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
