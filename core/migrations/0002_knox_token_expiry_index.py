from django.db import migrations, models

# knox 5.1 has no index on ``expiry``: pruning the expired tokens read the table whole, in key order.
EXPIRY = models.Index(fields=["expiry"], name="knox_authtoken_expiry")


def add_index(apps, schema_editor):
    schema_editor.add_index(apps.get_model("knox", "AuthToken"), EXPIRY)


def remove_index(apps, schema_editor):
    schema_editor.remove_index(apps.get_model("knox", "AuthToken"), EXPIRY)


class Migration(migrations.Migration):
    """An index on knox's token table, for ``core.services.api_token_list_delete_expired``.

    The table is knox's, so no model of ours declares the index and Django's state never holds it: the
    schema editor writes it (and drops it on the way back) in each database's own SQL, MariaDB's as the
    development SQLite's (whose DROP INDEX names no table). Should knox add one of its own, drop this.
    """

    dependencies = [("core", "0001_drop_clear_text_tokens"), ("knox", "0009_extend_authtoken_field")]

    operations = [migrations.RunPython(add_index, remove_index, atomic=False)]
