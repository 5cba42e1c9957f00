from django.db import migrations


class Migration(migrations.Migration):
    """API tokens moved to django-rest-knox, which keeps only their hashes: the old table of DRF's
    tokens, each stored in clear, goes (its tokens stop working; clients log in again)."""

    dependencies = [("knox", "0009_extend_authtoken_field")]

    operations = [migrations.RunSQL("DROP TABLE IF EXISTS authtoken_token", reverse_sql=migrations.RunSQL.noop)]
