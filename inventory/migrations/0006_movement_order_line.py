import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0005_stock_keyed_by_variant'),
        ('orders', '0011_refunds_by_line'),
    ]

    operations = [
        migrations.AddField(
            model_name='stockmovement',
            name='order_line',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='orders.orderline'),
        ),
    ]
