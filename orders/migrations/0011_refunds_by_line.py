import django.db.models.deletion
import django.db.models.manager
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


def refunded_orders_counted(apps, schema_editor):
    """Orders refunded before refunds by line were refunded in full: each gets the refund of every line
    (already emailed), and its counts say so, as ``reconcile`` checks."""
    Order = apps.get_model("orders", "Order")
    OrderLine = apps.get_model("orders", "OrderLine")
    Payment = apps.get_model("orders", "Payment")
    Refund = apps.get_model("orders", "Refund")
    RefundLine = apps.get_model("orders", "RefundLine")
    now = django.utils.timezone.now()
    for order in Order.objects.filter(status="refunded").iterator():
        payment = Payment.objects.filter(order=order, reference=order.payment_reference).first()
        if payment is None:
            continue
        shipping = order.shipping_price + (0 if order.prices_include_tax else order.shipping_tax)
        refund = Refund.objects.create(
            order=order, payment=payment, state="succeeded", amount=order.total, shipping=shipping, emailed_at=now
        )
        lines = list(order.lines.all())
        for line in lines:
            paid = line.line_total - line.discount + (0 if order.prices_include_tax else line.tax)
            RefundLine.objects.create(refund=refund, order_line=line, quantity=line.quantity, amount=paid)
            line.quantity_refunded = line.quantity
        OrderLine.objects.bulk_update(lines, ["quantity_refunded"])
        Order.objects.filter(pk=order.pk).update(amount_refunded=order.total, shipping_refunded=True)


class Migration(migrations.Migration):

    dependencies = [
        ('orders', '0010_shipments'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveField(
            model_name='payment',
            name='refund_restock',
        ),
        migrations.RemoveField(
            model_name='payment',
            name='refund_requested_by',
        ),
        migrations.AddField(
            model_name='order',
            name='amount_refunded',
            field=models.DecimalField(decimal_places=2, default=0, max_digits=12),
        ),
        migrations.AddField(
            model_name='order',
            name='shipping_refunded',
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name='orderline',
            name='quantity_refunded',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.CreateModel(
            name='Refund',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('is_deleted', models.BooleanField(db_index=True, default=False, editable=False)),
                ('deleted_at', models.DateTimeField(blank=True, editable=False, null=True)),
                ('state', models.CharField(choices=[('requested', 'Asked of the provider, not yet confirmed'), ('succeeded', 'Refunded'), ('failed', 'Refused by the provider: nothing refunded')], db_index=True, default='requested', max_length=20)),
                ('source', models.CharField(choices=[('staff', 'Staff'), ('return', 'An accepted return'), ('provider', 'Made at the provider (its dashboard)')], default='staff', max_length=20)),
                ('amount', models.DecimalField(decimal_places=2, max_digits=12)),
                ('shipping', models.DecimalField(decimal_places=2, default=0, max_digits=12)),
                ('restock', models.BooleanField(default=False)),
                ('emailed_at', models.DateTimeField(blank=True, editable=False, null=True)),
                ('order', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='refunds', to='orders.order')),
                ('payment', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='refunds', to='orders.payment')),
                ('requested_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['id'],
                'abstract': False,
                'base_manager_name': 'all_objects',
                'default_manager_name': 'objects',
            },
            managers=[
                ('objects', django.db.models.manager.Manager()),
                ('all_objects', django.db.models.manager.Manager()),
            ],
        ),
        migrations.CreateModel(
            name='RefundLine',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('is_deleted', models.BooleanField(db_index=True, default=False, editable=False)),
                ('deleted_at', models.DateTimeField(blank=True, editable=False, null=True)),
                ('quantity', models.PositiveIntegerField()),
                ('amount', models.DecimalField(decimal_places=2, max_digits=12)),
                ('order_line', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='refund_lines', to='orders.orderline')),
                ('refund', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='lines', to='orders.refund')),
            ],
            options={
                'ordering': ['id'],
                'abstract': False,
                'base_manager_name': 'all_objects',
                'default_manager_name': 'objects',
            },
            managers=[
                ('objects', django.db.models.manager.Manager()),
                ('all_objects', django.db.models.manager.Manager()),
            ],
        ),
        migrations.AlterField(
            model_name='orderemail',
            name='kind',
            field=models.CharField(choices=[('placed', 'Order placed'), ('paid', 'Receipt'), ('payment_failed', 'Payment failed'), ('expired', 'Reservation expired'), ('late_payment_refunded', 'Late payment refunded')], max_length=30),
        ),
        migrations.RunPython(refunded_orders_counted, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name='order',
            constraint=models.CheckConstraint(condition=models.Q(('amount_refunded__gte', 0), ('amount_refunded__lte', models.F('total'))), name='order_refunded_within_total'),
        ),
        migrations.AddConstraint(
            model_name='orderline',
            constraint=models.CheckConstraint(condition=models.Q(('quantity_refunded__lte', models.F('quantity'))), name='order_line_refunded_within_quantity'),
        ),
        migrations.AddConstraint(
            model_name='refund',
            constraint=models.CheckConstraint(condition=models.Q(('amount__gte', 0), ('shipping__gte', 0), ('shipping__lte', models.F('amount'))), name='refund_amounts_within_range'),
        ),
        migrations.AddConstraint(
            model_name='refundline',
            constraint=models.CheckConstraint(condition=models.Q(('quantity__gt', 0), ('amount__gte', 0)), name='refund_line_positive'),
        ),
        migrations.AddConstraint(
            model_name='refundline',
            constraint=models.UniqueConstraint(fields=('refund', 'order_line'), name='refund_line_one_per_order_line'),
        ),
    ]
