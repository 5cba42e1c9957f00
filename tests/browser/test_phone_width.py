"""The cart and "My orders" on a phone (390 x 844): every column a shopper needs stays on screen."""

from playwright.sync_api import expect

from orders.services import order_place
from tests.browser.conftest import screenshot

PHONE = {"width": 390, "height": 844}


def assert_on_screen(locator) -> None:
    """Shown, and inside the phone's width (not clipped, not past a sideways scroll)."""
    expect(locator).to_be_visible()
    box = locator.bounding_box()
    assert box is not None and box["width"] > 0, locator
    assert 0 <= box["x"] and box["x"] + box["width"] <= PHONE["width"], (locator, box)


def test_the_cart_keeps_quantity_update_and_remove_on_a_phone(page, make_variant):
    make_variant(sku="MUG", name="Logo mug with a rather long name for a phone", stock=5, price="12.50")
    make_variant(sku="TEE", name="Black tee", stock=20, price="19.00")
    page.set_viewport_size(PHONE)
    for sku in ["MUG", "TEE"]:
        page.goto(f"/products/{sku}/")
        page.get_by_role("button", name="Add to cart").click()
        expect(page.get_by_role("heading", name="Your cart")).to_be_visible()

    for name in ["Logo mug with a rather long name for a phone", "Black tee"]:
        assert_on_screen(page.get_by_role("spinbutton", name=f"Quantity of {name}"))
        assert_on_screen(page.get_by_role("button", name=f"Remove {name}"))
    for button in page.get_by_role("button", name="Update", exact=True).all():
        assert_on_screen(button)
    assert_on_screen(page.get_by_test_id("cart-total"))
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "cart-phone")

    page.get_by_role("button", name="Remove Black tee").click()
    expect(page.get_by_role("button", name="Remove Black tee")).to_have_count(0)
    assert_on_screen(page.get_by_role("button", name="Remove Logo mug with a rather long name for a phone"))


def test_my_orders_keeps_the_status_column_on_a_phone(page, make_variant, customer, monkeypatch):
    make_variant(sku="MUG", name="Logo mug", stock=5, price="1234.50")
    # The widest number there is (numbers are random): the table must fit whatever the letters.
    monkeypatch.setattr("orders.services.placing_batch.new_order_number", lambda: "W" * 10)
    order = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="phone-1")
    page.set_viewport_size(PHONE)
    page.goto("/accounts/login/?next=/orders/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("pw-alice-123")
    page.get_by_role("button", name="Log in").click()

    expect(page.get_by_role("heading", name="My orders")).to_be_visible()
    assert_on_screen(page.get_by_role("columnheader", name="Status"))
    assert_on_screen(page.get_by_text("Awaiting payment"))
    assert_on_screen(page.get_by_role("link", name=order.number))
    assert_on_screen(page.get_by_role("columnheader", name="Total"))
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "my-orders-phone")


def box(locator) -> dict:
    expect(locator).to_be_visible()
    return locator.bounding_box()


def assert_as_tall_as_a_text_box(select, text_box) -> None:
    """A select is as tall as the text boxes beside it (not 19 px beside 40 px)."""
    assert abs(box(select)["height"] - box(text_box)["height"]) <= 2, (box(select), box(text_box))


def assert_beside_its_words(control, label) -> None:
    """A checkbox or radio sits at the start of its label's one line, not stretched above its words."""
    control_box, label_box = box(control), box(label)
    assert control_box["width"] <= 24 and control_box["height"] <= 24, control_box
    assert label_box["height"] <= 2 * control_box["height"] + 8, (label_box, control_box)  # one line
    middle = control_box["y"] + control_box["height"] / 2
    assert label_box["y"] <= middle <= label_box["y"] + label_box["height"], (control_box, label_box)


def test_selects_and_checkboxes_are_sized_for_a_phone(page, make_variant, shipping_rules):
    make_variant(sku="LAMP", name="Desk lamp", stock=5, price="30.00", requires_shipping=True, weight_grams=900)
    page.set_viewport_size(PHONE)

    page.goto("/")
    filters = page.get_by_role("search")
    assert_as_tall_as_a_text_box(filters.get_by_role("combobox", name="Sort"), filters.get_by_role("searchbox"))
    in_stock = filters.locator("label", has_text="In stock only")
    assert_beside_its_words(in_stock.get_by_role("checkbox"), in_stock)
    screenshot(page, "catalog-phone")

    page.goto("/products/LAMP/")
    page.get_by_role("button", name="Add to cart").click()
    page.goto("/checkout/")
    shipping = page.get_by_role("group", name="Shipping address")
    with page.expect_navigation():
        shipping.get_by_role("combobox", name="Country").select_option(label="Germany")
    assert_as_tall_as_a_text_box(
        shipping.get_by_role("combobox", name="Country"), shipping.get_by_role("textbox", name="Full name")
    )
    billing = page.locator("label", has_text="Bill to the shipping address")
    assert_beside_its_words(billing.get_by_role("checkbox"), billing)
    standard = page.locator("label", has_text="Standard")
    assert_beside_its_words(standard.get_by_role("radio"), standard)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "checkout-phone")
