"""Every product becomes a product with one variant.

The table of SKUs (``shop_product``) becomes ``shop_productvariant``, rows, ids and SKUs unchanged, so
stock, reservations, order lines and the ledger keep pointing at the same units. Each of its rows gets a
new ``Product`` of the same name and description (deleted with it if it was deleted).
"""

import django.db.models.deletion
import django.db.models.manager
import django.utils.timezone
from django.db import migrations, models

import shop.models


def products_for_variants(apps, schema_editor):
    Product = apps.get_model("shop", "Product")
    ProductVariant = apps.get_model("shop", "ProductVariant")
    variants = ProductVariant._base_manager.filter(product__isnull=True).order_by("pk")
    for variant in variants.iterator(chunk_size=1000):
        product = Product._base_manager.create(
            name=variant.name,
            description=variant.description,
            created_at=variant.created_at,
            is_deleted=variant.is_deleted,
            deleted_at=variant.deleted_at,
        )
        ProductVariant._base_manager.filter(pk=variant.pk).update(product=product)


def descriptions_back(apps, schema_editor):
    ProductVariant = apps.get_model("shop", "ProductVariant")
    for variant in ProductVariant._base_manager.select_related("product").iterator(chunk_size=1000):
        ProductVariant._base_manager.filter(pk=variant.pk).update(description=variant.product.description)


class Migration(migrations.Migration):
    dependencies = [
        ("shop", "0004_sale_price_window"),
        ("inventory", "0004_oversell_demo_goods_moved_to_demo"),
        ("orders", "0007_addresses_shipping_and_totals"),
    ]

    operations = [
        migrations.RenameModel("Product", "ProductVariant"),
        migrations.CreateModel(
            name="Category",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("path", models.CharField(max_length=255, unique=True)),
                ("depth", models.PositiveIntegerField()),
                ("numchild", models.PositiveIntegerField(default=0)),
                ("created_at", models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("name", models.CharField(max_length=100)),
                ("slug", models.SlugField(max_length=100, unique=True)),
                ("description", models.TextField(blank=True)),
            ],
            options={"verbose_name_plural": "categories"},
        ),
        migrations.CreateModel(
            name="Product",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("created_at", models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("is_deleted", models.BooleanField(db_index=True, default=False, editable=False)),
                ("deleted_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("name", models.CharField(max_length=200)),
                ("description", models.TextField(blank=True)),
                (
                    "category",
                    models.ForeignKey(
                        blank=True,
                        help_text="Its main category.",
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="products",
                        to="shop.category",
                    ),
                ),
            ],
            options={
                "ordering": ["name", "id"],
                "abstract": False,
                "base_manager_name": "all_objects",
                "default_manager_name": "objects",
            },
            managers=[
                ("objects", django.db.models.manager.Manager()),
                ("all_objects", django.db.models.manager.Manager()),
            ],
        ),
        migrations.CreateModel(
            name="Option",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("created_at", models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("name", models.CharField(max_length=50, unique=True)),
            ],
            options={"ordering": ["name"]},
        ),
        migrations.CreateModel(
            name="OptionValue",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("created_at", models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("value", models.CharField(max_length=50)),
                ("position", models.PositiveSmallIntegerField(default=0)),
                (
                    "option",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="values", to="shop.option"
                    ),
                ),
            ],
            options={
                "ordering": ["option__name", "position", "value"],
                "constraints": [models.UniqueConstraint(fields=("option", "value"), name="option_value_unique")],
            },
        ),
        migrations.AddField(
            model_name="productvariant",
            name="option_values",
            field=models.ManyToManyField(blank=True, related_name="variants", to="shop.optionvalue"),
        ),
        migrations.AddField(
            model_name="productvariant",
            name="product",
            field=models.ForeignKey(
                null=True, on_delete=django.db.models.deletion.PROTECT, related_name="variants", to="shop.product"
            ),
        ),
        migrations.RunPython(products_for_variants, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="productvariant",
            name="product",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="variants", to="shop.product"
            ),
        ),
        migrations.RunPython(migrations.RunPython.noop, descriptions_back),
        migrations.RemoveField(model_name="productvariant", name="description"),
        migrations.CreateModel(
            name="ProductImage",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("created_at", models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("is_deleted", models.BooleanField(db_index=True, default=False, editable=False)),
                ("deleted_at", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "image",
                    models.ImageField(
                        height_field="height", upload_to=shop.models.image_upload_to, width_field="width"
                    ),
                ),
                ("width", models.PositiveIntegerField(default=0, editable=False)),
                ("height", models.PositiveIntegerField(default=0, editable=False)),
                ("thumbnail", models.ImageField(blank=True, editable=False, upload_to="products/thumbnails/")),
                (
                    "alt",
                    models.CharField(help_text="What the picture shows, for those who cannot see it.", max_length=200),
                ),
                ("position", models.PositiveSmallIntegerField(default=0)),
                (
                    "product",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="images", to="shop.product"
                    ),
                ),
                (
                    "variant",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="images",
                        to="shop.productvariant",
                    ),
                ),
            ],
            options={
                "ordering": ["position", "id"],
                "abstract": False,
                "base_manager_name": "all_objects",
                "default_manager_name": "objects",
            },
            managers=[
                ("objects", django.db.models.manager.Manager()),
                ("all_objects", django.db.models.manager.Manager()),
            ],
        ),
    ]
