import core.collation
from django.db import migrations


class Migration(migrations.Migration):
    """Account emails compared and kept unique byte for byte (MariaDB's default collation folds accents)."""

    dependencies = [
        ("accounts", "0001_initial"),
    ]

    operations = [
        migrations.AlterField(
            model_name="account",
            name="email",
            field=core.collation.ExactEmailField(max_length=254, unique=True),
        ),
    ]
