"""Stock and reservations point at ``ProductVariant``, the unit of stock; the columns are renamed, the
rows untouched. The index and its name stay as they are in the database."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0004_oversell_demo_goods_moved_to_demo"),
        ("shop", "0005_products_with_variants"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.RemoveIndex(model_name="reservation", name="reservation_product_expiry")]
        ),
        migrations.RenameField(model_name="stock", old_name="product", new_name="variant"),
        migrations.RenameField(model_name="reservation", old_name="product", new_name="variant"),
        migrations.AlterModelOptions(name="stock", options={"ordering": ["variant_id"]}),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="reservation",
                    index=models.Index(fields=["variant", "state", "expires_at"], name="reservation_product_expiry"),
                )
            ]
        ),
    ]
