"""The models that moved here from ``orders`` (its migration 0018 renamed their tables): state only."""

import django.db.models.deletion
import django.db.models.manager
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


MOVED = ['payment', 'paymentevent', 'refund', 'refundline']


def content_types_relabel(apps, source, target):
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MOVED:
        if not content_type.objects.filter(app_label=target, model=model).exists():
            content_type.objects.filter(app_label=source, model=model).update(app_label=target)


def content_types_move(apps, schema_editor):
    """The moved models' content types follow them, so permissions and admin history keep pointing at them."""
    content_types_relabel(apps, "orders", "payments")


def content_types_move_back(apps, schema_editor):
    """Unapplied, the models are orders' again (0018 renames the tables back): so are their content types."""
    content_types_relabel(apps, "payments", "orders")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ('orders', '0018_payments_and_fulfilment_move'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
                migrations.CreateModel(
                    name='Payment',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('is_deleted', models.BooleanField(db_index=True, default=False, editable=False)),
                        ('deleted_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('provider', models.CharField(max_length=20)),
                        ('attempt', models.PositiveIntegerField(default=1)),
                        ('reference', models.CharField(max_length=255, unique=True)),
                        ('redirect_url', models.CharField(blank=True, max_length=2000)),
                        ('provider_payment', models.CharField(blank=True, db_index=True, max_length=255)),
                        ('amount', models.DecimalField(decimal_places=2, max_digits=12)),
                        ('currency', models.CharField(max_length=3)),
                        ('charged_amount', models.DecimalField(blank=True, decimal_places=2, max_digits=12, null=True)),
                        ('charged_currency', models.CharField(blank=True, max_length=3)),
                        ('amount_refunded', models.DecimalField(decimal_places=2, default=0, max_digits=12)),
                        ('state', models.CharField(choices=[('pending', 'Started with the provider; outcome not yet known'), ('failed', 'Failed or declined'), ('charged', 'Charged, not yet applied'), ('captured', 'Applied: the order is paid with it'), ('refunding', 'Being refunded'), ('refunded', 'Refunded'), ('review', 'Charged another amount or currency than asked: left for staff')], db_index=True, default='pending', max_length=20)),
                        ('charged_at', models.DateTimeField(blank=True, null=True)),
                        ('order', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='payments', to='orders.order')),
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
                    name='PaymentEvent',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('is_deleted', models.BooleanField(db_index=True, default=False, editable=False)),
                        ('deleted_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('provider', models.CharField(max_length=20)),
                        ('event_id', models.CharField(max_length=255)),
                        ('type', models.CharField(max_length=100)),
                        ('payload', models.JSONField()),
                        ('processed_at', models.DateTimeField(blank=True, db_index=True, null=True)),
                    ],
                    options={
                        'ordering': ['id'],
                        'abstract': False,
                        'base_manager_name': 'all_objects',
                        'default_manager_name': 'objects',
                        'constraints': [models.UniqueConstraint(fields=('provider', 'event_id'), name='payment_event_once_per_provider')],
                    },
                    managers=[
                        ('objects', django.db.models.manager.Manager()),
                        ('all_objects', django.db.models.manager.Manager()),
                    ],
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
                        ('payment', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='refunds', to='payments.payment')),
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
                        ('quantity_restocked', models.PositiveIntegerField(default=0)),
                        ('order_line', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='refund_lines', to='orders.orderline')),
                        ('refund', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='lines', to='payments.refund')),
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
                migrations.AddConstraint(
                    model_name='payment',
                    constraint=models.CheckConstraint(condition=models.Q(('reference', ''), _negated=True), name='payment_reference_present'),
                ),
                migrations.AddConstraint(
                    model_name='payment',
                    constraint=models.CheckConstraint(condition=models.Q(('amount__gte', 0)), name='payment_amount_not_negative'),
                ),
                migrations.AddConstraint(
                    model_name='payment',
                    constraint=models.CheckConstraint(condition=models.Q(('amount_refunded__gte', 0), models.Q(('amount_refunded__lte', models.F('amount')), models.Q(('amount_refunded__lte', models.F('charged_amount')), ('charged_amount__isnull', False)), _connector='OR')), name='payment_refunded_within_charge'),
                ),
                migrations.AddConstraint(
                    model_name='payment',
                    constraint=models.UniqueConstraint(fields=('order', 'attempt'), name='payment_one_per_order_attempt'),
                ),
                migrations.AddIndex(
                    model_name='refund',
                    index=models.Index(fields=['updated_at'], name='refund_updated'),
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
                    constraint=models.CheckConstraint(condition=models.Q(('quantity_restocked__lte', models.F('quantity'))), name='refund_line_restocked_within_quantity'),
                ),
                migrations.AddConstraint(
                    model_name='refundline',
                    constraint=models.UniqueConstraint(fields=('refund', 'order_line'), name='refund_line_one_per_order_line'),
                ),
    
        ]),
        migrations.RunPython(content_types_move, content_types_move_back),
    ]
