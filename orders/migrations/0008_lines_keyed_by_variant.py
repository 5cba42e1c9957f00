"""Order lines point at ``ProductVariant``, the unit of stock; the column is renamed, the rows untouched.
The unique constraint and its name stay as they are in the database."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0007_addresses_shipping_and_totals"),
        ("shop", "0005_products_with_variants"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.RemoveConstraint(model_name="orderline", name="order_line_one_per_product")]
        ),
        migrations.RenameField(model_name="orderline", old_name="product", new_name="variant"),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddConstraint(
                    model_name="orderline",
                    constraint=models.UniqueConstraint(fields=("order", "variant"), name="order_line_one_per_product"),
                )
            ]
        ),
    ]
