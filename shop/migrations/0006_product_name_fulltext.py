"""A FULLTEXT index on product names, for the catalog's search (MariaDB; SQLite, the embedded mode's
database, searches by scanning)."""

from django.db import migrations


def fulltext_add(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        schema_editor.execute("ALTER TABLE shop_product ADD FULLTEXT INDEX product_name_fulltext (name)")


def fulltext_drop(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        schema_editor.execute("ALTER TABLE shop_product DROP INDEX product_name_fulltext")


class Migration(migrations.Migration):
    dependencies = [("shop", "0005_products_with_variants")]

    operations = [migrations.RunPython(fulltext_add, fulltext_drop, atomic=False)]
